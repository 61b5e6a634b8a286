package fuel

import (
	"fmt"
	"math"
	"strings"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Version identifies the pass. It changes whenever Instrument's output for
// some input changes, or could (version 8: the pass reads with
// wasmbin.ScanExpr; version 9: charge per segment; version 10: refill
// paths carry locals across the call; version 11: leaves have no check); a cache of
// instrumented modules keys on it together with the input's digest.
const Version = 11

// Reserved export names the pass adds. A module that exports any name
// beginning with ReservedPrefix is refused, whether or not it is resettable:
// the host finds the pass's counter, floor, start function, dirty flag and
// global snapshots by these names and must never find the module's own.
const (
	// ReservedPrefix begins every export name the pass or the host uses.
	ReservedPrefix = "sandboxd."

	// GlobalExport is the fuel counter: a mutable i64 global the guest
	// decrements.
	GlobalExport = "sandboxd.fuel"
	// LimitExport is the floor: a mutable i64 global only the host writes.
	// A check traps when the counter is below it.
	LimitExport = "sandboxd.fuel.limit"
	// StartExport is the module's start function, when it had one; the
	// host must call it once after instantiation, before anything else.
	StartExport = "sandboxd.start"
	// ImportModule and ImportName name the host function, of type [] -> [],
	// that the guest calls when its counter drops below the floor
	// (HostModule provides it). A module that already imports from
	// ImportModule is refused.
	ImportModule = "sandboxd_fuel"
	ImportName   = "refill"
)

// Counter values.
const (
	// Unlimited is the counter's initial value: enough fuel for centuries.
	Unlimited int64 = math.MaxInt64
	// Interrupted is the floor Meter.Interrupt sets: above any counter that
	// has been decremented at least once.
	Interrupted int64 = math.MaxInt64
	// Spent is the floor the host sets when it stops a call because its
	// budget is spent (refill or Charge found the counter negative): above
	// that counter, and different from every floor Set and refill compute
	// (at most Unlimited - Slice) and from Interrupted, so that after the
	// trap the floor says why the pass stopped the call (Meter.OutOfFuel).
	Spent int64 = math.MaxInt64 - 1
)

// Stats describes what Instrument did.
type Stats struct {
	// Functions is the number of function bodies instrumented.
	Functions int
	// Checks is the number of checks inserted (function entries plus loop
	// headers); Leaves is the number of functions metered without one
	// (leaves: no loop, no call; see Leaf functions).
	Checks, Leaves int
	// MovedStart reports that the module had a start function, now
	// exported as StartExport.
	MovedStart bool
	// FuelGlobal and LimitGlobal are the indices of the added globals.
	FuelGlobal, LimitGlobal uint32
	// Refill is the function index of the added import; the module's own
	// functions are numbered one higher than before.
	Refill uint32
	// Resettable reports that the module can be reset to its state after
	// instantiation (see DirtyExport); NotResettable says why not.
	Resettable    bool
	NotResettable string
	// TableElems is the sum of the initial (minimum) sizes of the tables
	// the module defines: the host charges them at instantiation
	// (table.grow asks the host for the rest, see ReserveName).
	TableElems int64
	// TableImports reports that the module uses table.grow and so imports
	// ReserveName and ReleaseName (function indices Refill+1 and Refill+2);
	// the module's own functions are then numbered three higher.
	TableImports bool
	// Helpers is the number of functions the pass appended after the
	// module's own (its bulk and growth helpers); MemoryGrows and TableGrows count the
	// distinct memory.grow and table.grow helpers among them.
	Helpers                 int
	MemoryGrows, TableGrows int
}

// Instrument returns the metered form of the module in, as described in the
// package documentation. in should be a module wazero accepts; Instrument
// checks encodings, not types, and any module it cannot read completely is
// refused. Errors are *toolerr.Error with code handler-shape-invalid,
// wrapping ErrMalformed or ErrUnsupported. Instrument does not modify in.
func Instrument(in []byte) ([]byte, *Stats, error) {
	return instrumentWith(in, options{})
}

// options change what the pass emits; the zero value is Instrument's.
// Tests and benchmarks use them to compare forms of the output.
type options struct {
	// plainLoops keeps the plain check (appendLocal) at every loop header
	// instead of versioning loops (appendLoopOpen): the output of pass
	// version 6.
	plainLoops bool
	// plainLeaves gives a leaf (a function without loops or calls) the
	// check and the sync through the floor that other functions have: the
	// output of pass version 10 for it.
	plainLeaves bool
}

func instrumentWith(in []byte, o options) ([]byte, *Stats, error) {
	m, err := Decode(in)
	if err != nil {
		return nil, nil, shapeErr(err)
	}
	st, err := m.instrument(o)
	if err != nil {
		return nil, nil, shapeErr(err)
	}
	return m.Encode(), st, nil
}

func shapeErr(err error) error {
	return toolerr.Wrap(toolerr.HandlerShapeInvalid, err, "cannot meter the module")
}

func (m *Module) instrument(o options) (*Stats, error) {
	st := &Stats{}
	plan := m.planReset()
	st.Resettable, st.NotResettable = plan.reason == "", plan.reason
	var nglobals uint64 = uint64(m.ImportedGlobals)
	if s := m.section(secGlobal); s != nil {
		nglobals += uint64(len(s.Globals))
	}
	if nglobals >= math.MaxUint32-1 || m.ImportedFuncs >= math.MaxUint32-3 {
		return nil, fmt.Errorf("%w: too many globals or imports", ErrMalformed)
	}
	fuel, limit := uint32(nglobals), uint32(nglobals)+1
	refill := m.ImportedFuncs
	nimp := uint32(1)
	if m.usesTableGrow() {
		nimp = 3
		st.TableImports = true
	}
	st.FuelGlobal, st.LimitGlobal, st.Refill = fuel, limit, refill
	remap := func(f uint32) uint32 {
		if f >= refill {
			return f + nimp
		}
		return f
	}

	if s := m.section(secTable); s != nil {
		if err := checkTables(s.Raw); err != nil {
			return nil, err
		}
	}
	tables, err := m.tables()
	if err != nil {
		return nil, err
	}
	for _, t := range tables[m.importedTables(len(tables)):] {
		st.TableElems += int64(t.min)
	}
	types := map[string]uint32{}
	addType := func(sig string) (uint32, error) {
		if i, ok := types[sig]; ok {
			return i, nil
		}
		i, err := m.addType(sig)
		types[sig] = i
		return i, err
	}
	imports := []importFunc{{name: ImportName, sig: "/"}}
	if nimp == 3 {
		imports = append(imports, importFunc{name: ReserveName, sig: "\x7f/\x7f"}, importFunc{name: ReleaseName, sig: "\x7f/"})
	}
	for i := range imports {
		if imports[i].typeIdx, err = addType(imports[i].sig); err != nil {
			return nil, err
		}
	}
	if err := m.addImports(imports); err != nil {
		return nil, err
	}
	var ndefined uint32
	if code := m.section(secCode); code != nil {
		ndefined = uint32(len(code.Funcs))
	}
	if uint64(refill)+uint64(nimp)+uint64(ndefined) >= 1<<27 {
		return nil, fmt.Errorf("%w: too many functions", ErrUnsupported)
	}
	hs := &helpers{
		base: refill + nimp + ndefined, fuel: fuel, limit: limit, refill: refill,
		reserve: refill + 1, release: refill + 2, tables: tables, index: map[helperKey]uint32{},
	}

	exports := m.ensureSection(secExport)
	for i, e := range exports.Exports {
		if strings.HasPrefix(e.Name, ReservedPrefix) {
			return nil, fmt.Errorf("%w: the module exports %q: names beginning with %q are reserved", ErrUnsupported, e.Name, ReservedPrefix)
		}
		if e.Kind == KindFunc {
			exports.Exports[i].Index = remap(e.Index)
		}
	}
	exports.Exports = append(exports.Exports,
		Export{Name: GlobalExport, Kind: KindGlobal, Index: fuel},
		Export{Name: LimitExport, Kind: KindGlobal, Index: limit})
	for i, s := range m.Sections {
		if s.ID == secStart {
			exports.Exports = append(exports.Exports, Export{Name: StartExport, Kind: KindFunc, Index: remap(s.Start)})
			m.Sections = append(m.Sections[:i], m.Sections[i+1:]...)
			st.MovedStart = true
			break
		}
	}

	globals := m.ensureSection(secGlobal)
	for i := range globals.Globals {
		init, _, err := transformExpr(globals.Globals[i].Init, remap, nil, bounds{globals: fuel})
		if err != nil {
			return nil, err
		}
		globals.Globals[i].Init = init
	}
	init := append([]byte{0x42}, wasmbin.AppendSLEB(nil, Unlimited)...)
	globals.Globals = append(globals.Globals,
		Global{Type: 0x7e, Mutable: true, Init: append(init, 0x0b)},
		Global{Type: 0x7e, Mutable: true, Init: []byte{0x42, 0x00, 0x0b}})
	chk := &checker{fuel: fuel, limit: limit, refill: refill, local: -1, bulk: hs, plainLoops: o.plainLoops, plainLeaves: o.plainLeaves}
	if st.Resettable {
		dirty := limit + 1
		globals.Globals = append(globals.Globals, Global{Type: 0x7f, Mutable: true, Init: []byte{0x41, 0x00, 0x0b}})
		exports.Exports = append(exports.Exports, Export{Name: DirtyExport, Kind: KindGlobal, Index: dirty})
		for k, g := range plan.globals {
			exports.Exports = append(exports.Exports, Export{Name: globalSnapshotName(k), Kind: KindGlobal, Index: g})
		}
		chk.dirty, chk.stateful = dirty, plan.stateful
	}

	if s := m.section(secElement); s != nil {
		raw, err := remapElements(s.Raw, remap, fuel)
		if err != nil {
			return nil, err
		}
		s.Raw = raw
	}
	params := m.paramTypes()
	if code := m.section(secCode); code != nil {
		if params == nil {
			return nil, fmt.Errorf("%w: function types the pass cannot read", ErrUnsupported)
		}
		for i := range code.Funcs {
			// Keep the counter in a new local of the function when it has
			// room for one more local.
			fchk := *chk
			fchk.local = -1
			n := uint64(len(params[i])) + localsOf(&code.Funcs[i])
			if n < maxLocals {
				fchk.local = int64(n)
			}
			fchk.params, fchk.groups = params[i], code.Funcs[i].Locals
			expr, n2, err := transformExpr(code.Funcs[i].Expr, remap, &fchk, bounds{globals: fuel, locals: n})
			if err == nil && fchk.local >= 0 {
				code.Funcs[i].Locals = append(code.Funcs[i].Locals, LocalGroup{Count: 1, Type: 0x7e})
			}
			if err != nil {
				return nil, fmt.Errorf("function %d: %w", int(m.ImportedFuncs)+i, err)
			}
			code.Funcs[i].Expr = expr
			st.Functions++
			st.Checks += n2
			if n2 == 0 {
				st.Leaves++
			}
		}
		// The helpers the bodies call, after the module's own functions.
		if len(hs.bodies) > 0 {
			fsec := m.section(secFunction)
			if fsec == nil {
				return nil, fmt.Errorf("%w: code without a function section", ErrMalformed)
			}
			r := wasmbin.NewReader(fsec.Raw, 0)
			n, err := r.Count(1)
			if err != nil {
				return nil, err
			}
			raw := wasmbin.AppendULEB(nil, uint64(n)+uint64(len(hs.bodies)))
			raw = append(raw, fsec.Raw[r.Offset():]...)
			for _, sig := range hs.types {
				ti, err := addType(sig)
				if err != nil {
					return nil, err
				}
				raw = wasmbin.AppendULEB(raw, uint64(ti))
			}
			fsec.Raw = raw
			code.Funcs = append(code.Funcs, hs.bodies...)
			st.Helpers = len(hs.bodies)
			st.MemoryGrows, st.TableGrows = hs.memoryGrows, hs.tableGrows
		}
	}
	hasNames := false
	for i := 0; i < len(m.Sections); i++ {
		if s := m.Sections[i]; s.ID == secCustom && s.Name == "name" {
			hasNames = true
			if s.Raw = fixNames(s.Raw, fuel, limit, refill, nimp, hs); s.Raw == nil {
				m.Sections = append(m.Sections[:i], m.Sections[i+1:]...)
				i--
			}
		}
	}
	if len(hs.bodies) > 0 && !hasNames {
		// Name the helpers (and the imports) in a name section of their
		// own, so that traps inside a helper are legible.
		var funcs []byte
		names := hs.names()
		funcs = wasmbin.AppendULEB(funcs, uint64(len(names)))
		for i, name := range names {
			funcs = appendName(wasmbin.AppendULEB(funcs, uint64(hs.base)+uint64(i)), name)
		}
		raw := append([]byte{1}, wasmbin.AppendULEB(nil, uint64(len(funcs)))...)
		m.Sections = append(m.Sections, &Section{ID: secCustom, Name: "name", Raw: append(raw, funcs...)})
	}
	return st, nil
}

// checkTables refuses table entries with initialiser expressions (typed
// function references), whose function indices the pass would have to
// renumber.
func checkTables(raw []byte) error {
	r := wasmbin.NewReader(raw, 0)
	n, err := r.Count(2)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := r.Valtype(); err != nil {
			return err
		}
		if _, err := r.Limits(); err != nil {
			return err
		}
	}
	if !r.EOF() {
		return r.Fail("trailing bytes in the table section")
	}
	return nil
}

// paramTypes returns the parameter types of each function the module
// defines, in order, or nil when the type or function section holds
// something other than plain function types (the pass then keeps the
// counter in the global only).
func (m *Module) paramTypes() [][]byte {
	var params [][]byte
	if s := m.section(secType); s != nil {
		r := wasmbin.NewReader(s.Raw, 0)
		n, err := r.Count(3)
		if err != nil {
			return nil
		}
		for i := uint32(0); i < n; i++ {
			if form, err := r.Byte(); err != nil || form != 0x60 {
				return nil
			}
			np, err := r.Count(1)
			if err != nil {
				return nil
			}
			at := r.Offset()
			if u32sValtypes(r, np) != nil {
				return nil
			}
			ps := s.Raw[at:r.Offset()] // one byte per value type
			nr, err := r.Count(1)
			if err != nil || u32sValtypes(r, nr) != nil {
				return nil
			}
			params = append(params, ps)
		}
	}
	code := m.section(secCode)
	if code == nil {
		return [][]byte{}
	}
	s := m.section(secFunction)
	if s == nil {
		return nil
	}
	r := wasmbin.NewReader(s.Raw, 0)
	n, err := r.Count(1)
	if err != nil || int(n) != len(code.Funcs) {
		return nil
	}
	out := make([][]byte, n)
	for i := range out {
		t, err := r.U32()
		if err != nil || int(t) >= len(params) {
			return nil
		}
		out[i] = params[t]
	}
	return out
}

// u32sValtypes skips n value types.
func u32sValtypes(r *wasmbin.Reader, n uint32) error {
	for i := uint32(0); i < n; i++ {
		if err := r.Valtype(); err != nil {
			return err
		}
	}
	return nil
}

// localsOf counts a function's declared locals.
func localsOf(f *Func) uint64 {
	var n uint64
	for _, g := range f.Locals {
		n += uint64(g.Count)
	}
	return n
}
