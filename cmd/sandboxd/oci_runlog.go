package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// runNoteMinSize is the smallest download sandboxd run reports on stderr:
// a module under it arrives too fast to be worth a line.
const runNoteMinSize = 1 << 20

// downloadNotes is the slog handler run gives the OCI resolver: of the
// resolver's events it prints only artifact-download events of blobs over
// runNoteMinSize, as plain lines on w ("sandboxd run: downloading …", a
// progress line every 5 s for one over artifact.LargeBlob, "downloaded …
// in 1.2 s"). Resolves, cached modules and small blobs print nothing;
// failures reach the envelope instead.
type downloadNotes struct {
	mu *sync.Mutex
	w  io.Writer
}

func newDownloadNotes(w io.Writer) *slog.Logger {
	return slog.New(downloadNotes{mu: new(sync.Mutex), w: w})
}

func (h downloadNotes) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h downloadNotes) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "artifact-download" {
		return nil
	}
	var ref, digest, state string
	var size, done, ms int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "ref":
			ref = a.Value.String()
		case "digest":
			digest = a.Value.String()
		case "state":
			state = a.Value.String()
		case "size":
			size = a.Value.Int64()
		case "bytes":
			done = a.Value.Int64()
		case "ms":
			ms = a.Value.Int64()
		}
		return true
	})
	if size < runNoteMinSize {
		return nil
	}
	var line string
	switch state {
	case "started":
		line = fmt.Sprintf("downloading %s from %s (blob %s)", humanBytes(size), ref, digest)
	case "progress":
		line = fmt.Sprintf("downloading %s from %s: %s so far", humanBytes(size), ref, humanBytes(done))
	case "done":
		d := time.Duration(ms) * time.Millisecond
		if d >= time.Second {
			d = d.Round(100 * time.Millisecond)
		}
		line = fmt.Sprintf("downloaded %s from %s in %s", humanBytes(size), ref, d)
	default:
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintf(h.w, "sandboxd run: %s\n", line)
	return err
}

func (h downloadNotes) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h downloadNotes) WithGroup(string) slog.Handler      { return h }
