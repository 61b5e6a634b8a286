package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Recordings configures serve --record-failures and --record-sample
// (docs/replay.md "Recording in serve").
type Recordings struct {
	// Dir receives the recordings (created 0700; files 0600). Empty: off.
	Dir string
	// Failures records every call and keeps the recordings of failed ones
	// (handler-error, handler-trap, limits-exceeded,
	// output-validation-failed).
	Failures bool
	// Sample, when positive, keeps the recording of one call in Sample
	// whatever its outcome (canaries).
	Sample int
	// MaxFiles and MaxBytes bound Dir: past either, the oldest recordings
	// are removed (defaults 100 and 256 MiB).
	MaxFiles int
	MaxBytes int64
	// CallMaxBytes caps one recording (executor.RecordOptions.MaxBytes).
	CallMaxBytes int64
}

// Default bounds of a recordings directory.
const (
	DefaultRecordMaxFiles = 100
	DefaultRecordMaxBytes = 256 << 20
)

// recordExt names the recordings a store owns in its directory.
const recordExt = ".rec.jsonl"

// recordStore keeps the recordings of served calls in a bounded directory.
type recordStore struct {
	cfg   Recordings
	calls atomic.Uint64 // calls seen, for the sample

	mu    sync.Mutex
	files []storedRecording // oldest first
	total int64
	seq   uint64
}

type storedRecording struct {
	path string
	size int64
}

// newRecordStore opens (creating it 0700) the directory of cfg and counts
// the recordings already there against its bounds.
func newRecordStore(cfg Recordings) (*recordStore, error) {
	if cfg.Dir == "" || (!cfg.Failures && cfg.Sample <= 0) {
		return nil, nil
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultRecordMaxFiles
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultRecordMaxBytes
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	st := &recordStore{cfg: cfg}
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	type aged struct {
		storedRecording
		mod time.Time
	}
	var old []aged
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), recordExt) {
			continue
		}
		if info, err := e.Info(); err == nil {
			old = append(old, aged{storedRecording{filepath.Join(cfg.Dir, e.Name()), info.Size()}, info.ModTime()})
		}
	}
	sort.Slice(old, func(i, j int) bool {
		return old[i].mod.Before(old[j].mod) || old[i].mod.Equal(old[j].mod) && old[i].path < old[j].path
	})
	for _, o := range old {
		st.files = append(st.files, o.storedRecording)
		st.total += o.size
	}
	st.mu.Lock()
	st.trim()
	st.mu.Unlock()
	return st, nil
}

// start returns the recorder of a call about to run (nil: not recorded)
// and whether it is sampled (kept whatever the outcome).
func (st *recordStore) start() (*executor.Recorder, bool) {
	if st == nil {
		return nil, false
	}
	n := st.calls.Add(1)
	sampled := st.cfg.Sample > 0 && n%uint64(st.cfg.Sample) == 0
	if !sampled && !st.cfg.Failures {
		return nil, false
	}
	return executor.NewRecorder(executor.RecordOptions{MaxBytes: st.cfg.CallMaxBytes}), sampled
}

// recordedFailure reports whether a call that failed with err leaves a
// recording under --record-failures.
func recordedFailure(err error) bool {
	if err == nil {
		return false
	}
	switch toolerr.As(err).Code {
	case toolerr.HandlerError, toolerr.HandlerTrap, toolerr.LimitsExceeded, toolerr.OutputValidationFailed:
		return true
	}
	return false
}

// keep writes the recording of a finished call when it is kept (sampled,
// or a failure under Failures) and returns its path ("" when not kept or
// when writing failed: a recording never fails a call).
func (st *recordStore) keep(rec *executor.Recorder, callID string, err error, sampled bool) string {
	if rec == nil || !(sampled || st.cfg.Failures && recordedFailure(err)) {
		return ""
	}
	st.mu.Lock()
	st.seq++
	seq := st.seq
	st.mu.Unlock()
	name := fmt.Sprintf("%s-%06d-%s%s", time.Now().UTC().Format("20060102T150405.000Z"), seq%1_000_000, safeName(callID), recordExt)
	path := filepath.Join(st.cfg.Dir, name)
	f, ferr := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if ferr != nil {
		return ""
	}
	n, werr := rec.WriteTo(f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return ""
	}
	st.mu.Lock()
	st.files = append(st.files, storedRecording{path, n})
	st.total += n
	st.trim()
	kept := len(st.files) > 0 && st.files[len(st.files)-1].path == path
	st.mu.Unlock()
	if !kept {
		return "" // larger than the whole directory's bound
	}
	return path
}

// trim removes the oldest recordings past the bounds; the caller holds mu.
func (st *recordStore) trim() {
	for len(st.files) > 0 && (len(st.files) > st.cfg.MaxFiles || st.total > st.cfg.MaxBytes) {
		old := st.files[0]
		if err := os.Remove(old.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			break // keep counting it rather than lose track of it
		}
		st.files = st.files[1:]
		st.total -= old.size
	}
}

// safeName keeps the characters of s a file name may hold everywhere.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}
