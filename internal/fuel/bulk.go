package fuel

import (
	"fmt"
	"math"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// The chunk sizes and rates of the bulk and growth helpers (see Bulk and
// growth instructions in the package documentation).
const (
	// BulkChunkBytes is the most memory a helper touches between checks.
	BulkChunkBytes = 64 << 10
	// BulkChunkElems is the most table elements a helper touches between
	// checks (64 KiB of references).
	BulkChunkElems = BulkChunkBytes / TableElemBytes
	// BulkByteShift: memory.fill costs one unit per 1<<BulkByteShift bytes.
	// One unit per byte: a Slice is then 1 MiB of work, which stays about
	// a millisecond even on never-touched memory, where every 4 KiB page
	// faults (at 1 unit per 8 bytes a Slice was 8 MiB of first touches, and
	// a GC stop-the-world beside a filling guest waited 25-50 ms in
	// TestServeLivenessHostile). On warm memory the refill this costs is
	// one host call per ~50 µs of memset.
	BulkByteShift = 0
	// BulkCopyShift: memory.copy and memory.init cost one unit per
	// 1<<BulkCopyShift bytes (one per byte, as fill; see BulkByteShift).
	BulkCopyShift = 0
	// MemoryPageCost is the fuel memory.grow charges per page added.
	MemoryPageCost = (64 << 10) >> BulkByteShift
	// GrowBaseCost is what every memory.grow and table.grow costs besides
	// its delta: both leave compiled code for Go (measured by
	// TestSliceTime: a few hundred nanoseconds).
	GrowBaseCost = 256

	// ReserveName and ReleaseName are the table-growth imports of
	// ImportModule (only a module that uses table.grow imports them).
	ReserveName = "table_reserve"
	ReleaseName = "table_release"
)

// tableType is what the helpers need of a table.
type tableType struct {
	ref    byte   // 0x70 funcref, 0x6f externref
	max    uint64 // the declared maximum, or math.MaxUint32 - 1
	hasMax bool
	min    uint64
}

// tables lists the module's tables, imported first.
func (m *Module) tables() ([]tableType, error) {
	var ts []tableType
	read := func(r *wasmbin.Reader) error {
		t, err := r.Byte()
		if err != nil {
			return err
		}
		flag, err := r.Byte()
		if err != nil {
			return err
		}
		if flag > 1 {
			return r.Errorf(ErrUnsupported, "table limits flag %d", flag)
		}
		tt := tableType{ref: t, max: math.MaxUint32 - 1}
		if tt.min, err = r.ULEB(32); err != nil {
			return err
		}
		if flag == 1 {
			if tt.max, err = r.ULEB(32); err != nil {
				return err
			}
			tt.hasMax = true
		}
		ts = append(ts, tt)
		return nil
	}
	if s := m.section(secImport); s != nil {
		r := wasmbin.NewReader(s.Raw, 0)
		n, err := r.Count(4)
		if err != nil {
			return nil, err
		}
		for i := uint32(0); i < n; i++ {
			if _, err := r.Name(); err != nil {
				return nil, err
			}
			if _, err := r.Name(); err != nil {
				return nil, err
			}
			if !r.EOF() && s.Raw[r.Offset()] == KindTable {
				r.SetOffset(r.Offset() + 1)
				if err := read(r); err != nil {
					return nil, err
				}
				continue
			}
			if _, err := importDesc(r); err != nil {
				return nil, err
			}
		}
	}
	if s := m.section(secTable); s != nil {
		r := wasmbin.NewReader(s.Raw, 0)
		n, err := r.Count(2)
		if err != nil {
			return nil, err
		}
		for i := uint32(0); i < n; i++ {
			if err := read(r); err != nil {
				return nil, err
			}
		}
	}
	return ts, nil
}

// importedTables counts the imported tables among n tables.
func (m *Module) importedTables(n int) int {
	if s := m.section(secTable); s != nil {
		r := wasmbin.NewReader(s.Raw, 0)
		if d, err := r.Count(2); err == nil && int(d) <= n {
			return n - int(d)
		}
	}
	return n
}

// names returns the name-section names of the helpers, in index order.
func (h *helpers) names() []string {
	out := make([]string, len(h.keys))
	for i, k := range h.keys {
		op := map[byte]string{0x40: "memory.grow", 8: "memory.init", 10: "memory.copy", 11: "memory.fill",
			12: "table.init", 14: "table.copy", 15: "table.grow", 17: "table.fill"}[k.op]
		out[i] = fmt.Sprintf("%s%s.%s.%d.%d", ReservedPrefix, "bulk", op, k.a, k.b)
	}
	return out
}

// usesTableGrow reports whether any function body contains table.grow.
func (m *Module) usesTableGrow() bool {
	s := m.section(secCode)
	if s == nil {
		return false
	}
	found := false
	for _, f := range s.Funcs {
		r := wasmbin.NewReader(f.Expr, 0)
		_ = wasmbin.ScanExpr(r, wasmbin.Refuse, func(_ wasmbin.Op, start, end int) {
			if f.Expr[start] == 0xfc && end > start+1 && f.Expr[start+1] == 15 {
				found = true
			}
		})
		if found {
			return true
		}
	}
	return false
}

// helperKey names a helper: the instruction (0x40 memory.grow, or the 0xfc
// sub-opcode) and its immediates.
type helperKey struct {
	op   byte
	a, b uint32
}

// helpers collects the helper functions one module needs.
type helpers struct {
	base                    uint32 // the function index of the first helper
	fuel, limit, refill     uint32
	reserve, release        uint32 // table imports (when tableGrow)
	tables                  []tableType
	index                   map[helperKey]uint32
	keys                    []helperKey
	types                   []string // signature of each helper (params + "/" + results)
	bodies                  []Func   // each helper's body
	memoryGrows, tableGrows int
}

// isBulk reports whether the instruction at expr[start:end] is one the pass
// replaces by a helper call.
func isBulk(expr []byte, start int) bool {
	switch expr[start] {
	case 0x40:
		return true
	case 0xfc:
		switch expr[start+1] {
		case 8, 10, 11, 12, 14, 15, 17:
			return true
		}
	}
	return false
}

// helperFor returns the index of the helper replacing the instruction
// expr[start:end], adding it when it is new.
func (h *helpers) helperFor(ins []byte) (uint32, error) {
	k := helperKey{op: ins[0]}
	r := wasmbin.NewReader(ins, 1)
	if ins[0] == 0xfc {
		k.op = ins[1]
		r.SetOffset(2)
		switch k.op {
		case 8, 12, 14: // memory.init data; table.init elem table; table.copy dst src
			a, err := r.U32()
			if err != nil {
				return 0, err
			}
			k.a = a
			if k.op != 8 {
				if k.b, err = r.U32(); err != nil {
					return 0, err
				}
			}
		case 15, 17: // table.grow, table.fill
			a, err := r.U32()
			if err != nil {
				return 0, err
			}
			k.a = a
		}
	}
	if i, ok := h.index[k]; ok {
		return i, nil
	}
	sig, body, err := h.build(k)
	if err != nil {
		return 0, err
	}
	i := h.base + uint32(len(h.bodies))
	h.index[k] = i
	h.keys = append(h.keys, k)
	h.types = append(h.types, sig)
	h.bodies = append(h.bodies, body)
	return i, nil
}

// asm builds a function body.
type asm []byte

func (a asm) op(b ...byte) asm       { return append(a, b...) }
func (a asm) lget(i uint32) asm      { return wasmbin.AppendULEB(append(a, 0x20), uint64(i)) }
func (a asm) lset(i uint32) asm      { return wasmbin.AppendULEB(append(a, 0x21), uint64(i)) }
func (a asm) ltee(i uint32) asm      { return wasmbin.AppendULEB(append(a, 0x22), uint64(i)) }
func (a asm) gget(i uint32) asm      { return wasmbin.AppendULEB(append(a, 0x23), uint64(i)) }
func (a asm) gset(i uint32) asm      { return wasmbin.AppendULEB(append(a, 0x24), uint64(i)) }
func (a asm) call(f uint32) asm      { return wasmbin.AppendULEB(append(a, 0x10), uint64(f)) }
func (a asm) i32(v int32) asm        { return wasmbin.AppendSLEB(append(a, 0x41), int64(v)) }
func (a asm) i64(v int64) asm        { return wasmbin.AppendSLEB(append(a, 0x42), v) }
func (a asm) fc(sub byte) asm        { return append(a, 0xfc, sub) }
func (a asm) u32(v uint32) asm       { return wasmbin.AppendULEB(a, uint64(v)) }
func (a asm) tableSize(t uint32) asm { return a.fc(16).u32(t) }

// Local indices inside a helper: its three parameters, then c (the chunk,
// i32), off (i32) and k (the cost, i64).
const (
	hp0, hp1, hp2 = 0, 1, 2
	hc, hoff, hk  = 3, 4, 5
)

// extend64 is i64.extend_i32_u.
const extend64 = 0xad

// sum64 pushes the u64 sum of two i32 locals (no overflow).
func (a asm) sum64(x, y uint32) asm {
	return a.lget(x).op(extend64).lget(y).op(extend64).op(0x7c)
}

// memBytes pushes the memory's size in bytes as an i64.
func (a asm) memBytes() asm { return a.op(0x3f, 0x00, extend64).i64(16).op(0x86) }

// charge subtracts local k from the counter and checks it (the global
// form of the pass's check: the caller wrote its count to the global before
// the call and reloads it after).
func (a asm) charge(h *helpers) asm {
	a = a.gget(h.fuel).lget(hk).op(0x7d).gset(h.fuel)
	a = a.gget(h.fuel).gget(h.limit).op(0x53, 0x04, 0x40).call(h.refill)
	a = a.gget(h.fuel).gget(h.limit).op(0x53, 0x04, 0x40, 0x00, 0x0b, 0x0b)
	return a
}

// chunk sets c = min(local n, size).
func (a asm) chunk(n uint32, size int32) asm {
	return a.lget(n).i32(size).lget(n).i32(size).op(0x49, 0x1b).lset(hc)
}

// costOfChunk sets k = (c >> shift) + 1.
func (a asm) costOfChunk(shift int32) asm {
	if shift > 0 {
		a = a.lget(hc).i32(shift).op(0x76, extend64)
	} else {
		a = a.lget(hc).op(extend64)
	}
	return a.i64(1).op(0x7c).lset(hk)
}

// build returns the signature and body of the helper for k.
func (h *helpers) build(k helperKey) (string, Func, error) {
	var a asm
	tbl := func(i uint32) (tableType, error) {
		if int(i) >= len(h.tables) {
			return tableType{}, fmt.Errorf("%w: table %d does not exist", ErrMalformed, i)
		}
		return h.tables[i], nil
	}
	// forward copies chunk by chunk from the start: n = p2, then the op
	// with operands (p0, p1, c) and both offsets advanced. advance1 says
	// whether p1 is an offset (not fill's value).
	forward := func(size, shift int32, op func(asm) asm, advance1 bool) {
		a = a.op(0x03, 0x40)
		a = a.chunk(hp2, size).costOfChunk(shift).charge(h)
		a = op(a.lget(hp0).lget(hp1).lget(hc))
		a = a.lget(hp0).lget(hc).op(0x6a).lset(hp0)
		if advance1 {
			a = a.lget(hp1).lget(hc).op(0x6a).lset(hp1)
		}
		a = a.lget(hp2).lget(hc).op(0x6b).ltee(hp2).op(0x0d, 0x00, 0x0b)
	}
	// backward copies chunk by chunk from the end (off = n down to 0).
	backward := func(size, shift int32, op func(asm) asm) {
		a = a.lget(hp2).lset(hoff).op(0x03, 0x40)
		a = a.chunk(hoff, size)
		a = a.lget(hoff).lget(hc).op(0x6b).lset(hoff)
		a = a.costOfChunk(shift).charge(h)
		a = op(a.lget(hp0).lget(hoff).op(0x6a).lget(hp1).lget(hoff).op(0x6a).lget(hc))
		a = a.lget(hoff).op(0x0d, 0x00, 0x0b)
	}
	// orig executes the original instruction with the original operands
	// (out of bounds: it traps) and returns.
	orig := func(op func(asm) asm) {
		a = op(a.op(0x04, 0x40).lget(hp0).lget(hp1).lget(hp2)).op(0x0f, 0x0b)
	}
	const maxU32 = int64(math.MaxUint32)
	switch k.op {
	case 11: // memory.fill (d, v, n)
		fill := func(a asm) asm { return a.fc(11).op(0x00) }
		a = a.sum64(hp0, hp2).memBytes().op(0x56)
		orig(fill)
		forward(BulkChunkBytes, BulkByteShift, fill, false)
		return "\x7f\x7f\x7f/", h.body(2, a), nil
	case 10: // memory.copy (d, s, n)
		cp := func(a asm) asm { return a.fc(10).op(0x00, 0x00) }
		a = a.sum64(hp0, hp2).memBytes().op(0x56).sum64(hp1, hp2).memBytes().op(0x56, 0x72)
		orig(cp)
		a = a.lget(hp0).lget(hp1).op(0x4b, 0x04, 0x40)
		backward(BulkChunkBytes, BulkCopyShift, cp)
		a = a.op(0x05)
		forward(BulkChunkBytes, BulkCopyShift, cp, true)
		a = a.op(0x0b)
		return "\x7f\x7f\x7f/", h.body(2, a), nil
	case 8: // memory.init seg (d, s, n)
		in := func(a asm) asm { return a.fc(8).u32(k.a).op(0x00) }
		a = a.sum64(hp0, hp2).memBytes().op(0x56).sum64(hp1, hp2).i64(maxU32).op(0x56, 0x72)
		orig(in)
		a = in(a.lget(hp0).lget(hp1).lget(hp2).op(0x6a).i32(0)) // probe the segment's end
		forward(BulkChunkBytes, BulkCopyShift, in, true)
		return "\x7f\x7f\x7f/", h.body(2, a), nil
	case 17: // table.fill t (i, ref, n)
		t, err := tbl(k.a)
		if err != nil {
			return "", Func{}, err
		}
		fill := func(a asm) asm { return a.fc(17).u32(k.a) }
		a = a.sum64(hp0, hp2).tableSize(k.a).op(extend64, 0x56)
		orig(fill)
		forward(BulkChunkElems, 0, fill, false)
		return "\x7f" + string(t.ref) + "\x7f/", h.body(2, a), nil
	case 14: // table.copy dst src (d, s, n)
		if _, err := tbl(k.a); err != nil {
			return "", Func{}, err
		}
		if _, err := tbl(k.b); err != nil {
			return "", Func{}, err
		}
		cp := func(a asm) asm { return a.fc(14).u32(k.a).u32(k.b) }
		a = a.sum64(hp0, hp2).tableSize(k.a).op(extend64, 0x56).sum64(hp1, hp2).tableSize(k.b).op(extend64, 0x56, 0x72)
		orig(cp)
		a = a.lget(hp0).lget(hp1).op(0x4b, 0x04, 0x40)
		backward(BulkChunkElems, 0, cp)
		a = a.op(0x05)
		forward(BulkChunkElems, 0, cp, true)
		a = a.op(0x0b)
		return "\x7f\x7f\x7f/", h.body(2, a), nil
	case 12: // table.init elem table (d, s, n)
		if _, err := tbl(k.b); err != nil {
			return "", Func{}, err
		}
		in := func(a asm) asm { return a.fc(12).u32(k.a).u32(k.b) }
		a = a.sum64(hp0, hp2).tableSize(k.b).op(extend64, 0x56).sum64(hp1, hp2).i64(maxU32).op(0x56, 0x72)
		orig(in)
		a = in(a.lget(hp0).lget(hp1).lget(hp2).op(0x6a).i32(0))
		forward(BulkChunkElems, 0, in, true)
		return "\x7f\x7f\x7f/", h.body(2, a), nil
	case 15: // table.grow t (ref, n) -> old size or -1
		t, err := tbl(k.a)
		if err != nil {
			return "", Func{}, err
		}
		h.tableGrows++
		grow := func(a asm) asm { return a.lget(hp0).lget(hp1).fc(15).u32(k.a) }
		const r = hp2 // the result, an i32 local
		// locals: r (2), two more i32s, k (5)
		// n == 0 always succeeds and costs only the base.
		a = a.i64(GrowBaseCost).lset(hk).charge(h)
		a = grow(a.lget(hp1).op(0x45, 0x04, 0x40)).op(0x0f, 0x0b)
		// past the maximum: -1 without asking the host
		maxLen := int64(min(t.max, math.MaxUint32-1))
		a = a.tableSize(k.a).op(extend64).lget(hp1).op(extend64, 0x7c).i64(maxLen).op(0x56, 0x04, 0x40).i32(-1).op(0x0f, 0x0b)
		a = a.lget(hp1).op(extend64).lset(hk).charge(h)
		a = a.lget(hp1).call(h.reserve).op(0x45, 0x04, 0x40).i32(-1).op(0x0f, 0x0b)
		a = grow(a).ltee(r).i32(-1).op(0x46, 0x04, 0x40).lget(hp1).call(h.release).op(0x0b)
		a = a.lget(r)
		// locals after the two parameters: r (i32), an unused i32, k (i64)
		return string(t.ref) + "\x7f/\x7f", h.body(3, a), nil
	case 0x40: // memory.grow (n) -> old size or -1
		h.memoryGrows++
		const r = hp1
		a = a.i64(GrowBaseCost).lset(hk).charge(h)
		a = a.lget(hp0).op(0x40, 0x00).ltee(r).i32(-1).op(0x47, 0x04, 0x40)
		a = a.lget(hp0).op(extend64).i64(MemoryPageCost).op(0x7e).lset(hk).charge(h).op(0x0b)
		a = a.lget(r)
		return "\x7f/\x7f", h.body(4, a), nil
	}
	return "", Func{}, fmt.Errorf("%w: no helper for opcode %#x", ErrUnsupported, k.op)
}

// body assembles a helper: i32s i32 locals after its parameters (so that
// local hk, 5, is the first i64 local after them), one i64, and the
// expression a closed by end.
func (h *helpers) body(i32s uint32, a asm) Func {
	return Func{Locals: []LocalGroup{{Count: i32s, Type: 0x7f}, {Count: 1, Type: 0x7e}}, Expr: append(a, 0x0b)}
}
