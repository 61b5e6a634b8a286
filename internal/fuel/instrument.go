package fuel

import (
	"fmt"
	"math"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Version identifies the pass. It changes whenever Instrument's output for
// some input changes; a cache of instrumented modules keys on it together
// with the input's digest.
const Version = 1

// Reserved export names the pass adds. A module that already exports either
// name is refused.
const (
	// GlobalExport is the fuel counter: a mutable i64 global the guest
	// decrements.
	GlobalExport = "sandboxd.fuel"
	// LimitExport is the floor: a mutable i64 global only the host writes.
	// A check traps when the counter is below it.
	LimitExport = "sandboxd.fuel.limit"
	// StartExport is the module's start function, when it had one; the
	// host must call it once after instantiation, before anything else.
	StartExport = "sandboxd.start"
)

// Counter values.
const (
	// Unlimited is the counter's initial value: enough fuel for centuries.
	Unlimited int64 = math.MaxInt64
	// Interrupted is the floor Meter.Interrupt sets: above any counter that
	// has been decremented at least once.
	Interrupted int64 = math.MaxInt64
)

// Stats describes what Instrument did.
type Stats struct {
	// Functions is the number of function bodies instrumented.
	Functions int
	// Checks is the number of checks inserted (function entries plus loop
	// headers).
	Checks int
	// MovedStart reports that the module had a start function, now
	// exported as StartExport.
	MovedStart bool
	// FuelGlobal and LimitGlobal are the indices of the added globals.
	FuelGlobal, LimitGlobal uint32
}

// Instrument returns the metered form of the module in, as described in the
// package documentation. in should be a module wazero accepts; Instrument
// checks encodings, not types, and any module it cannot read completely is
// refused. Errors are *toolerr.Error with code handler-shape-invalid,
// wrapping ErrMalformed or ErrUnsupported. Instrument does not modify in.
func Instrument(in []byte) ([]byte, *Stats, error) {
	m, err := Decode(in)
	if err != nil {
		return nil, nil, shapeErr(err)
	}
	st, err := m.instrument()
	if err != nil {
		return nil, nil, shapeErr(err)
	}
	return m.Encode(), st, nil
}

func shapeErr(err error) error {
	return toolerr.Wrap(toolerr.HandlerShapeInvalid, err, "cannot meter the module")
}

func (m *Module) instrument() (*Stats, error) {
	st := &Stats{}
	var nglobals uint64 = uint64(m.ImportedGlobals)
	if s := m.section(secGlobal); s != nil {
		nglobals += uint64(len(s.Globals))
	}
	if nglobals >= math.MaxUint32-1 {
		return nil, fmt.Errorf("%w: too many globals", ErrMalformed)
	}
	fuel, limit := uint32(nglobals), uint32(nglobals)+1
	st.FuelGlobal, st.LimitGlobal = fuel, limit

	exports := m.ensureSection(secExport)
	for _, e := range exports.Exports {
		if e.Name == GlobalExport || e.Name == LimitExport || e.Name == StartExport {
			return nil, fmt.Errorf("%w: the module exports the reserved name %q", ErrUnsupported, e.Name)
		}
	}
	exports.Exports = append(exports.Exports,
		Export{Name: GlobalExport, Kind: KindGlobal, Index: fuel},
		Export{Name: LimitExport, Kind: KindGlobal, Index: limit})
	for i, s := range m.Sections {
		if s.ID == secStart {
			exports.Exports = append(exports.Exports, Export{Name: StartExport, Kind: KindFunc, Index: s.Start})
			m.Sections = append(m.Sections[:i], m.Sections[i+1:]...)
			st.MovedStart = true
			break
		}
	}

	init := append([]byte{0x42}, appendSLEB(nil, Unlimited)...)
	globals := m.ensureSection(secGlobal)
	globals.Globals = append(globals.Globals,
		Global{Type: 0x7e, Mutable: true, Init: append(init, 0x0b)},
		Global{Type: 0x7e, Mutable: true, Init: []byte{0x42, 0x00, 0x0b}})

	if code := m.section(secCode); code != nil {
		for i := range code.Funcs {
			expr, n, err := meterExpr(code.Funcs[i].Expr, fuel, limit)
			if err != nil {
				return nil, fmt.Errorf("function %d: %w", int(m.ImportedFuncs)+i, err)
			}
			code.Funcs[i].Expr = expr
			st.Functions++
			st.Checks += n
		}
	}
	for _, s := range m.Sections {
		if s.ID == secCustom && s.Name == "name" {
			s.Raw = fixNames(s.Raw, fuel, limit)
		}
	}
	return st, nil
}

// meterExpr returns a function body's expression with checks inserted and
// the number of checks.
func meterExpr(expr []byte, fuel, limit uint32) ([]byte, int, error) {
	// Pass 1: the cost of each level (level 0 is the function, then one per
	// loop in order of appearance) and where each loop's check goes.
	type frame struct{ level int }
	costs := []int64{0}
	var at []int // offset after each loop header, by level-1
	stack := []frame{{0}}
	r := &reader{b: expr}
	err := scanExpr(r, func(k opKind, _, end int) {
		cur := stack[len(stack)-1].level
		switch k {
		case opOther:
			costs[cur]++
		case opIf:
			costs[cur]++
			stack = append(stack, frame{cur})
		case opBlock:
			stack = append(stack, frame{cur})
		case opLoop:
			stack = append(stack, frame{len(costs)})
			costs = append(costs, 0)
			at = append(at, end)
		case opEnd:
			stack = stack[:len(stack)-1]
		}
	})
	if err != nil {
		return nil, 0, err
	}
	if !r.eof() {
		return nil, 0, r.fail("trailing bytes after a function body")
	}
	// Pass 2: copy with the checks inserted.
	out := make([]byte, 0, len(expr)+len(costs)*24)
	out = appendCheck(out, fuel, limit, costs[0])
	prev := 0
	for i, off := range at {
		out = append(out, expr[prev:off]...)
		out = appendCheck(out, fuel, limit, costs[i+1])
		prev = off
	}
	out = append(out, expr[prev:]...)
	return out, len(costs), nil
}

// appendCheck appends: fuel -= cost; if fuel < limit { unreachable }.
func appendCheck(b []byte, fuel, limit uint32, cost int64) []byte {
	cost = max(cost, 1)
	b = append(b, 0x23) // global.get
	b = appendULEB(b, uint64(fuel))
	b = append(b, 0x42) // i64.const
	b = appendSLEB(b, cost)
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = appendULEB(b, uint64(fuel))
	b = append(b, 0x23) // global.get
	b = appendULEB(b, uint64(fuel))
	b = append(b, 0x23) // global.get
	b = appendULEB(b, uint64(limit))
	// i64.lt_s, if (empty), unreachable, end
	return append(b, 0x53, 0x04, 0x40, 0x00, 0x0b)
}

// fixNames keeps the name section correct for the instrumented module: it
// drops the label-names subsection (the inserted ifs renumber labels) and
// names the added globals in the global-names subsection. A name section it
// cannot read is returned unchanged (wazero ignores a bad one, as the
// specification allows).
func fixNames(raw []byte, fuel, limit uint32) []byte {
	const (
		subLabels  = 3
		subGlobals = 7
	)
	r := &reader{b: raw}
	var out []byte
	added := false
	addGlobal := func(entries []byte, n uint32) {
		body := appendULEB(nil, uint64(n)+2)
		body = append(body, entries...)
		body = appendULEB(body, uint64(fuel))
		body = appendName(body, GlobalExport)
		body = appendULEB(body, uint64(limit))
		body = appendName(body, LimitExport)
		out = append(out, subGlobals)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
		added = true
	}
	for !r.eof() {
		id, err := r.byte()
		if err != nil {
			return raw
		}
		size, err := r.u32()
		if err != nil {
			return raw
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return raw
		}
		if id > subGlobals && !added {
			addGlobal(nil, 0)
		}
		switch id {
		case subLabels:
			continue
		case subGlobals:
			br := &reader{b: body}
			n, err := br.u32()
			if err != nil || added {
				return raw
			}
			addGlobal(body[br.off:], n)
			continue
		}
		out = append(out, id)
		out = appendULEB(out, uint64(size))
		out = append(out, body...)
	}
	if !added {
		addGlobal(nil, 0)
	}
	return out
}
