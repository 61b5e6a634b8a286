package executor

import (
	"bytes"
	"reflect"
	"strconv"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
)

// state is a module instance's state right after initialisation: what a
// reset writes back and what an instance cloned from its tool's image starts
// from (reactorHandler.clone).
type state struct {
	memSize int           // bytes of linear memory; -1 without one
	runs    []run         // its chunks that are not all zero, in order (nil when img holds them)
	img     *limits.Image // the memory as a copy-on-write image, or nil
	values  []uint64      // the mutable globals, in the order of the pass's exports
	// ws is the pages calls of instances mapped from img wrote and read,
	// made resident in every new instance (state.learn); learnt counts the
	// calls it was learnt from.
	ws     atomic.Pointer[limits.WorkingSet]
	learnt atomic.Int32
	// init is the host answers the instantiation that made this state drew
	// (Config.WithRecordable; record.go), known says they were kept.
	init      []*RecordedCall
	initKnown bool
}

// snapshot is what an instance is reset to, and its handles to do it.
type snapshot struct {
	st      *state
	own     bool // st is this instance's alone (not its tool's image)
	globals []api.MutableGlobal
	dirty   api.MutableGlobal
}

// recyclable reports whether t's instances may be reset and reused: only
// when the pass's own verdict, kept with the compiled module (fuel.Verdict),
// says the module is resettable. Nothing the module exports is consulted for
// that decision: a module may export any name the pass does not reserve for
// it.
func (t *reactorHandler) recyclable() bool {
	return t.metered && t.verdict.Resettable && t.poolable() && t.posture == manifest.PostureContextIsolated &&
		!t.cfg.deterministic && t.cfg.recycle
}

// bind finds the exports a reset needs in mod, or returns nil when the pass
// did not make the module resettable (v). It reads exactly the exports the
// pass added to a module it found resettable: the dirty flag and v.globals
// mutable globals, names the pass refuses in such a module's own exports.
func bind(mod api.Module, v fuel.Verdict) *snapshot {
	if !v.Resettable {
		return nil
	}
	dirty, ok := mod.ExportedGlobal(fuel.DirtyExport).(api.MutableGlobal)
	if !ok || dirty.Type() != api.ValueTypeI32 {
		return nil
	}
	s := &snapshot{dirty: dirty}
	for k := 0; k < v.Globals; k++ {
		g, ok := mod.ExportedGlobal(fuel.GlobalSnapshotExport + strconv.Itoa(k)).(api.MutableGlobal)
		if !ok {
			return nil // not the module the pass produced
		}
		s.globals = append(s.globals, g)
	}
	return s
}

// save records mod's state for recycling, or returns nil when the pass did
// not make the module resettable (v; see bind).
func save(mod api.Module, v fuel.Verdict) *snapshot {
	s := bind(mod, v)
	if s == nil {
		return nil
	}
	// What _initialize changed in the host is part of the state a reset
	// reproduces (the host keeps it); only later changes make the instance
	// dirty.
	s.dirty.Set(0)
	if s.st = capture(mod, s, false); s.st == nil {
		return nil
	}
	s.own = true
	return s
}

// capture reads mod's state through s's handles: its globals' values and
// its memory, as a copy-on-write image when asImage and the memory is large
// enough for mapping to beat copying (imageMapMin), else as the non-zero
// chunks copied to the Go heap. It returns nil when the memory cannot be
// read.
func capture(mod api.Module, s *snapshot, asImage bool) *state {
	st := &state{memSize: -1}
	for _, g := range s.globals {
		st.values = append(st.values, g.Get())
	}
	mem := memoryOf(mod)
	if mem == nil {
		return st
	}
	b, ok := mem.Read(0, mem.Size())
	if !ok {
		return nil
	}
	st.memSize = len(b)
	if asImage && len(b) > imageMapMin {
		if img, err := limits.NewImage(b); err == nil && img != nil {
			st.img = img
			return st
		}
	}
	st.runs = nonZeroRuns(b)
	return st
}

// run is a stretch of saved memory at off.
type run struct {
	off  int
	data []byte
}

// chunk is the granularity at which a snapshot skips zeros.
const chunk = 4096

// nonZeroRuns copies the chunks of b that hold a non-zero byte, merging
// neighbours: a reset clears the rest, which is cheaper than copying zeros
// (a WAT guest's memory is often all zero after initialisation; a Go
// guest's is half zero).
func nonZeroRuns(b []byte) []run {
	var runs []run
	for off := 0; off < len(b); off += chunk {
		c := b[off:min(off+chunk, len(b))]
		if allZero(c) {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].off+len(runs[n-1].data) == off {
			runs[n-1].data = append(runs[n-1].data, c...)
			continue
		}
		runs = append(runs, run{off: off, data: append([]byte(nil), c...)})
	}
	return runs
}

// allZero reports whether b, at most a chunk long, holds only zeros
// (bytes.Equal is the vectorised comparison).
func allZero(b []byte) bool { return bytes.Equal(b, zeroChunk[:len(b)]) }

// restore writes the saved memory over b (of the saved size): the runs are
// copied, everything between them cleared (clearDirty).
func (s *state) restore(b []byte) {
	at := 0
	for _, r := range s.runs {
		clearDirty(b[at:r.off])
		at = r.off + copy(b[r.off:], r.data)
	}
	clearDirty(b[at:])
}

// zeroChunk is what allZero and clearDirty compare memory with.
var zeroChunk [chunk]byte

// clearDirty makes b all zeros, writing only the 4 KiB chunks that are not
// zero already. A call writes a little of its instance's memory (the echo
// guest ~2 KiB of 64 KiB); clearing all of it after every call wrote every
// cache line, and with calls on two cores the lines moved between them at
// each reset: in a CPU profile of 4 goroutines calling a recycled echo tool
// the reset's memclr was 1.35 µs a call at GOMAXPROCS 1 and 2.68 µs at 2,
// most of what the second core lost. Comparing leaves the untouched lines
// shared and clean in both caches.
func clearDirty(b []byte) {
	for len(b) > 0 {
		n := min(len(b), len(zeroChunk))
		if !bytes.Equal(b[:n], zeroChunk[:n]) {
			clear(b[:n])
		}
		b = b[n:]
	}
}

// size is the Go heap the snapshot holds for its instance alone: a tool's
// image is held once for all its instances, and an image's pages are not
// on the heap.
func (s *snapshot) size() int64 {
	if s == nil || !s.own || s.st == nil {
		return 0
	}
	var n int64
	for _, r := range s.st.runs {
		n += int64(len(r.data))
	}
	return n
}

// reset puts in back into its saved state. It returns false, leaving in for
// the caller to close, when that is impossible: the instance is closed, a
// state-changing host call made it dirty, or its memory grew and could not
// be put back to its saved size (instance.shrink).
func (in *instance) reset() bool {
	s := in.snap
	if s == nil || in.mod.IsClosed() || s.dirty.Get() != 0 {
		return false
	}
	if mem := memoryOf(in.mod); mem != nil && int64(mem.Size()) != int64(s.st.memSize) && !in.shrink(mem, s.st.memSize) {
		if in.grew != nil {
			in.grew.Add(1) // the tool stops saving snapshots after a few (newInstance)
		}
		return false
	}
	if !in.load(s.st, s.globals, false) {
		return false
	}
	in.init, in.initKnown = s.st.init, s.st.initKnown // the answers that made the state it is now in
	in.vars.release()                                 // an Extism plug-in's vars: the next call starts without (abiExtism.begin)
	in.vars = nil
	if in.kernel != nil {
		in.kernel.Idle() // the last call's kernel pages and records, let go before the instance waits in the pool
	}
	in.resetAccount()
	in.recycled++
	return true
}

// load writes st into in: its memory (of st's size already) and its mutable
// globals through the handles. zeroed says the memory is known to be all
// zero (a fresh instance that wrote nothing into it), so a copied state
// need only write its non-zero chunks. It returns false when that failed;
// the instance must then be closed, never run.
func (in *instance) load(st *state, globals []api.MutableGlobal, zeroed bool) bool {
	mem := memoryOf(in.mod)
	switch {
	case mem == nil:
		if st.memSize != -1 {
			return false
		}
	case int64(mem.Size()) != int64(st.memSize):
		return false
	case st.img != nil:
		mapped, seen, err := in.acct.MapImage(st.img, st.ws.Load(), st.learning()) // copy-on-write: a mapping, or putting back written pages
		if err != nil {
			return false
		}
		st.learn(seen)
		if !mapped {
			b, ok := mem.Read(0, mem.Size())
			if !ok || !st.img.CopyTo(b) {
				return false
			}
		}
	default:
		b, ok := mem.Read(0, mem.Size())
		if !ok {
			return false
		}
		if zeroed {
			for _, r := range st.runs {
				copy(b[r.off:], r.data)
			}
		} else {
			st.restore(b)
		}
	}
	if len(globals) != len(st.values) {
		return false
	}
	for i, g := range globals {
		g.Set(st.values[i])
	}
	return true
}

// heldBytes is what an idle pooled instance holds against the pool budget:
// its linear memory, its tables, its snapshot and an Extism plug-in's
// kernel (emptied by reset: its kept page and small tables).
func (in *instance) heldBytes() int64 {
	n := in.acct.Linear() + in.tables.bytes() + in.snap.size()
	if in.kernel != nil {
		n += in.kernel.HeldBytes()
	}
	return n
}

// memoryOf returns mod's memory, or nil for a module without one (wazero's
// Module.Memory returns a typed nil pointer then: an Extism plug-in needs
// no memory of its own, and calling a method on that nil crashes).
func memoryOf(mod api.Module) api.Memory {
	mem := mod.Memory()
	if mem == nil {
		return nil
	}
	if v := reflect.ValueOf(mem); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return mem
}

// shrink puts mem, which grew during the call, back to size bytes, as a
// fresh instance's memory is (its memory.size, and zeros past it when it
// grows again): Wasm memory never shrinks, so without this an instance of a
// guest that grows its memory in every call (go-sdk's Rust count_vowels, a
// page; GHC's allocator, a megablock) could never be reset. The bytes past
// size are discarded (limits.Account.Discard: released pages, reading as
// zeros), then wazero is given the shorter memory through the fields of its
// memory instance (memFields), one page short, and grows it by that page:
// Grow reallocates through the instance's allocator (limits: a reslice,
// the charge moved to size) and tells the compiled code the memory's new
// base and length (wazero's MemoryGrown), as after any memory.grow. It
// reports false — the caller closes the instance — when that is not
// possible: wazero's memory is not the type memFields knows, it is shared,
// or size is not a whole, non-zero number of pages below its size.
func (in *instance) shrink(mem api.Memory, size int) bool {
	if size < limits.PageSize || size%limits.PageSize != 0 || int64(mem.Size()) <= int64(size) {
		return false
	}
	f, ok := memFields(mem)
	if !ok || !in.acct.Discard(int64(size)) {
		return false
	}
	buf := f.buffer.Bytes()
	f.buffer.SetBytes(buf[:size-limits.PageSize])
	f.cap.SetUint(uint64(size/limits.PageSize - 1))
	if _, ok := mem.Grow(1); !ok {
		return false // its memory is now a page short: closed, never run
	}
	return int64(mem.Size()) == int64(size)
}

// wazeroMemory is where shrink writes in wazero's memory instance: its
// exported Buffer ([]byte, the memory) and Cap (uint32, pages allocated),
// found by reflection for the type wazero's api.Memory is (memLayoutOf).
// ok is false when that type has no such fields or the memory is shared
// (Shared).
type wazeroMemory struct {
	buffer, cap reflect.Value
}

// memLayout is where a memory type keeps the fields shrink needs (nil
// indexes: not found); memLayoutOf keeps the last type's.
type memLayout struct {
	typ                 reflect.Type
	buffer, cap, shared []int
}

var lastMemLayout atomic.Pointer[memLayout]

func memLayoutOf(t reflect.Type) *memLayout {
	if l := lastMemLayout.Load(); l != nil && l.typ == t {
		return l
	}
	field := func(name string, kind reflect.Kind) []int {
		f, ok := t.FieldByName(name)
		if !ok || !f.IsExported() || f.Type.Kind() != kind || kind == reflect.Slice && f.Type.Elem().Kind() != reflect.Uint8 {
			return nil
		}
		return f.Index
	}
	l := &memLayout{typ: t, buffer: field("Buffer", reflect.Slice), cap: field("Cap", reflect.Uint32), shared: field("Shared", reflect.Bool)}
	lastMemLayout.Store(l)
	return l
}

func memFields(mem api.Memory) (wazeroMemory, bool) {
	v := reflect.ValueOf(mem)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return wazeroMemory{}, false
	}
	e := v.Elem()
	l := memLayoutOf(e.Type())
	if l.buffer == nil || l.cap == nil || l.shared == nil || e.FieldByIndex(l.shared).Bool() {
		return wazeroMemory{}, false
	}
	f := wazeroMemory{buffer: e.FieldByIndex(l.buffer), cap: e.FieldByIndex(l.cap)}
	return f, f.buffer.CanSet() && f.cap.CanSet()
}
