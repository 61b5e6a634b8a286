package fuel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Cache keeps the pass's outputs, so that it runs once per distinct module:
// its output and its Verdict are kept in memory, keyed by the input's digest
// and the pass Version, and on disk in the cache's directory (a private one,
// beside the compilation cache). The verdict travels with the module,
// because what the host does with an instance is decided by it and by
// nothing the module itself supplies: the host resets an instance only for
// a module the pass found resettable, through exactly the globals the pass
// exported, and charges the module's initial tables at instantiation.
//
// A disk entry is a header, the pass's Stats (MarshalStats, which carries
// the pass version), the number of globals the pass exported for a reset,
// and the module, followed by a SHA-256 digest that binds all of them to
// the input's digest and the pass version. An entry that does not parse,
// or whose digest does not match (a truncated write, a corrupted disk, a
// module copied over the entry, an entry of another module renamed), is
// ignored: the pass runs again and the entry is rewritten. The digest is
// not a secret: it proves that an entry is the one this cache wrote for
// this input, not that nobody who can write the private cache directory
// forged it; such a writer can equally replace the compiled native code in
// the compilation cache beside it.
//
// A Cache is safe for concurrent use.
type Cache struct {
	dir string   // "" keeps entries in memory only
	mem sync.Map // fuelKey → fuelEntry
}

// NewCache returns a cache keeping its disk entries in dir, created mode
// 0700 when the first is written; "" keeps them in memory only.
func NewCache(dir string) *Cache { return &Cache{dir: dir} }

// fuelKey identifies a pass output.
type fuelKey struct {
	digest  [sha256.Size]byte
	version int
}

// Verdict is what the host keeps of the pass's Stats for a module.
type Verdict struct {
	// Resettable is Stats.Resettable: the pass reserved DirtyExport and
	// the snapshot exports, and added them itself.
	Resettable bool
	// Globals is how many mutable globals the pass exported for a reset
	// (GlobalSnapshotExport0 … Globals-1); 0 unless Resettable.
	Globals int
	// TableElems is Stats.TableElems, the sum of the initial sizes of the
	// module's tables: the elements instantiation allocates.
	TableElems int64
}

type fuelEntry struct {
	out     []byte
	verdict Verdict
	err     error
}

// Instrument returns bin metered and the pass's verdict, from the cache
// when it has them: in memory, then on disk (see Cache). An error is the
// pass's, kept like an output.
// A disk entry is written atomically (temporary file, then rename), so a
// crash never leaves a partial module behind.
func (c *Cache) Instrument(bin []byte) ([]byte, Verdict, error) {
	key := fuelKey{sha256.Sum256(bin), Version}
	if v, ok := c.mem.Load(key); ok {
		ent := v.(fuelEntry)
		return ent.out, ent.verdict, ent.err
	}
	var path string
	if c.dir != "" {
		path = filepath.Join(c.dir, fmt.Sprintf("v%d-%x.wasm", key.version, key.digest))
		if raw, err := readRegular(path); err == nil {
			if out, v, ok := decodeFuelEntry(key, raw); ok {
				c.mem.Store(key, fuelEntry{out: out, verdict: v})
				return out, v, nil
			}
		}
	}
	out, st, err := Instrument(bin)
	var v Verdict
	if err == nil {
		v, err = verdictOf(bin, st)
	}
	if err != nil {
		out = nil
	}
	c.mem.Store(key, fuelEntry{out: out, verdict: v, err: err})
	if err == nil && path != "" {
		// A cache: failing to write only costs the next process a rerun.
		if entry, err := encodeFuelEntry(key, out, st, v.Globals); err == nil {
			_ = writeAtomic(path, entry)
		}
	}
	return out, v, err
}

// verdictOf derives the verdict from the pass's Stats and its input bin.
func verdictOf(bin []byte, st *Stats) (Verdict, error) {
	v := Verdict{Resettable: st.Resettable, TableElems: st.TableElems}
	if v.Resettable {
		// The pass exports every defined mutable global of a resettable
		// module (which imports none), in order.
		m, err := Decode(bin)
		if err != nil {
			return Verdict{}, err
		}
		for _, s := range m.Sections {
			for _, g := range s.Globals {
				if g.Mutable {
					v.Globals++
				}
			}
		}
	}
	return v, nil
}

// fuelMagic starts every disk entry; its last byte is the entry format.
const fuelMagic = "sandboxd-fuel\x02"

// encodeFuelEntry lays out a disk entry: magic, the pass's Stats
// (MarshalStats), the number of snapshot globals, the module, digest.
func encodeFuelEntry(key fuelKey, out []byte, st *Stats, globals int) ([]byte, error) {
	stats, err := MarshalStats(st)
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
func decodeFuelEntry(key fuelKey, raw []byte) (out []byte, v Verdict, ok bool) {
	if len(raw) < len(fuelMagic)+sha256.Size || !bytes.HasPrefix(raw, []byte(fuelMagic)) {
		return nil, Verdict{}, false
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if d := fuelEntryDigest(key, body); !bytes.Equal(d[:], sum) {
		return nil, Verdict{}, false
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
		return nil, Verdict{}, false
	}
	st, err := UnmarshalStats(r[:n])
	if err != nil {
		return nil, Verdict{}, false
	}
	r = r[n:]
	globals, ok1 := field()
	size, ok2 := field()
	if !ok1 || !ok2 || size != uint64(len(r)) || len(r) < 8 || globals > 1<<32 || st.TableElems < 0 ||
		(!st.Resettable && globals != 0) {
		return nil, Verdict{}, false
	}
	return r, Verdict{Resettable: st.Resettable, Globals: int(globals), TableElems: st.TableElems}, true
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
