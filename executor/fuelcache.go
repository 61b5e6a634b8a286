package executor

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// The cache of instrumented modules.
//
// The pass runs once per distinct module: its output and its verdict are
// kept in memory, keyed by the input's digest and the pass version, and on
// disk beside the compilation cache (a private directory, like it). The
// verdict travels with the module, because what the host does with an
// instance is decided by it and by nothing the module itself supplies:
// recycling (recycle.go) happens only for a module the pass found
// resettable, through exactly the globals the pass exported, and the
// module's initial tables are charged to memMB at instantiation.
//
// A disk entry is a header, the pass's Stats (fuel.MarshalStats, which
// carries the pass version), the number of globals the pass exported for a
// reset, and the module, followed by a SHA-256 digest that binds all of them to the input's digest and the pass
// version. An entry that does not parse, or whose digest does not match
// (a truncated write, a corrupted disk, a module copied over the entry, an
// entry of another module renamed), is ignored: the pass runs again and the
// entry is rewritten. The digest is not a secret: it proves that an entry
// is the one this cache wrote for this input, not that nobody who can
// write the private cache directory forged it; such a writer can equally
// replace the compiled native code in the compilation cache beside it.

// fuelKey identifies a pass output.
type fuelKey struct {
	digest  [sha256.Size]byte
	version int
}

// passVerdict is what the executor keeps of the pass's Stats.
type passVerdict struct {
	// resettable is fuel.Stats.Resettable: the pass reserved DirtyExport
	// and the snapshot exports, and added them itself.
	resettable bool
	// globals is how many mutable globals the pass exported for a reset
	// (GlobalSnapshotExport0 … globals-1); 0 unless resettable.
	globals int
	// tableElems is fuel.Stats.TableElems, the sum of the initial sizes of
	// the module's tables: the elements instantiation allocates.
	tableElems int64
}

type fuelEntry struct {
	out     []byte
	verdict passVerdict
	err     error
}

// instrument returns bin metered and the pass's verdict, from the
// executor's caches when they have it: in memory, then on disk (see above).
// A disk entry is written atomically (temporary file, then rename), so a
// crash never leaves a partial module behind.
func (e *Executor) instrument(bin []byte) ([]byte, passVerdict, error) {
	key := fuelKey{sha256.Sum256(bin), fuel.Version}
	if v, ok := e.fuelCache.Load(key); ok {
		ent := v.(fuelEntry)
		return ent.out, ent.verdict, ent.err
	}
	var path string
	if e.fuelDir != "" {
		path = filepath.Join(e.fuelDir, fmt.Sprintf("v%d-%x.wasm", key.version, key.digest))
		if raw, err := readRegular(path); err == nil {
			if out, v, ok := decodeFuelEntry(key, raw); ok {
				e.fuelCache.Store(key, fuelEntry{out: out, verdict: v})
				return out, v, nil
			}
		}
	}
	out, st, err := fuel.Instrument(bin)
	var v passVerdict
	if err == nil {
		v, err = verdictOf(bin, st)
	}
	if err != nil {
		out = nil
	}
	e.fuelCache.Store(key, fuelEntry{out: out, verdict: v, err: err})
	if err == nil && path != "" {
		// A cache: failing to write only costs the next process a rerun.
		if entry, err := encodeFuelEntry(key, out, st, v.globals); err == nil {
			_ = writeAtomic(path, entry)
		}
	}
	return out, v, err
}

// verdictOf derives the verdict from the pass's Stats and its input bin.
func verdictOf(bin []byte, st *fuel.Stats) (passVerdict, error) {
	v := passVerdict{resettable: st.Resettable, tableElems: st.TableElems}
	if v.resettable {
		// The pass exports every defined mutable global of a resettable
		// module (which imports none), in order.
		m, err := fuel.Decode(bin)
		if err != nil {
			return passVerdict{}, err
		}
		for _, s := range m.Sections {
			for _, g := range s.Globals {
				if g.Mutable {
					v.globals++
				}
			}
		}
	}
	return v, nil
}

// fuelMagic starts every disk entry; its last byte is the entry format.
const fuelMagic = "sandboxd-fuel\x02"

// encodeFuelEntry lays out a disk entry: magic, the pass's Stats
// (fuel.MarshalStats), the number of snapshot globals, the module, digest.
func encodeFuelEntry(key fuelKey, out []byte, st *fuel.Stats, globals int) ([]byte, error) {
	stats, err := fuel.MarshalStats(st)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(fuelMagic)+3*binary.MaxVarintLen64+len(stats)+len(out)+sha256.Size)
	b = append(b, fuelMagic...)
	b = binary.AppendUvarint(b, uint64(len(stats)))
	b = append(b, stats...)
	b = binary.AppendUvarint(b, uint64(globals))
	b = binary.AppendUvarint(b, uint64(len(out)))
	b = append(b, out...)
	d := fuelEntryDigest(key, b)
	return append(b, d[:]...), nil
}

// decodeFuelEntry checks and reads a disk entry; ok is false for anything
// encodeFuelEntry did not write for key.
func decodeFuelEntry(key fuelKey, raw []byte) (out []byte, v passVerdict, ok bool) {
	if len(raw) < len(fuelMagic)+sha256.Size || !bytes.HasPrefix(raw, []byte(fuelMagic)) {
		return nil, passVerdict{}, false
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if d := fuelEntryDigest(key, body); !bytes.Equal(d[:], sum) {
		return nil, passVerdict{}, false
	}
	r := body[len(fuelMagic):]
	field := func() (uint64, bool) {
		n, k := binary.Uvarint(r)
		if k <= 0 {
			return 0, false
		}
		r = r[k:]
		return n, true
	}
	n, ok := field()
	if !ok || n > uint64(len(r)) {
		return nil, passVerdict{}, false
	}
	st, err := fuel.UnmarshalStats(r[:n])
	if err != nil {
		return nil, passVerdict{}, false
	}
	r = r[n:]
	globals, ok1 := field()
	size, ok2 := field()
	if !ok1 || !ok2 || size != uint64(len(r)) || len(r) < 8 || globals > 1<<32 || st.TableElems < 0 ||
		(!st.Resettable && globals != 0) {
		return nil, passVerdict{}, false
	}
	return r, passVerdict{resettable: st.Resettable, globals: int(globals), tableElems: st.TableElems}, true
}

// fuelEntryDigest binds an entry's bytes to the input and pass version it
// was made for.
func fuelEntryDigest(key fuelKey, body []byte) [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "sandboxd fuel cache entry\x00pass v%d\x00", key.version)
	h.Write(key.digest[:])
	h.Write(body)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// readRegular reads path if it is a regular file of a sane size (a cache
// entry is never a FIFO or a device: opening one could block).
func readRegular(path string) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > 1<<30 {
		return nil, fmt.Errorf("%s: not a regular cache entry", path)
	}
	return os.ReadFile(path)
}

func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
