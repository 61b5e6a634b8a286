package wasmbin

import (
	"errors"
	"fmt"
)

// FuncShape is the part of a function body's shape that predicts how long
// wazero takes to compile it.
type FuncShape struct {
	// Index is the function's index in the function index space (imports
	// first).
	Index uint32
	// Locals counts parameters and declared locals.
	Locals uint64
	// BodyBytes is the size of the body (local declarations and code).
	BodyBytes uint64
	// Instrs counts instructions; Loops counts loop instructions; MaxDepth
	// is the deepest block nesting.
	Instrs, Loops, MaxDepth uint64
	// Carried estimates the values carried around loops (the phis wazero's
	// SSA builder makes): for every loop, the locals it reads or writes
	// (at most Locals) plus the loop's block parameters.
	Carried uint64
	// Weight sums, over every loop, its carried values times the
	// instructions inside it: what wazero v1.12's register allocation and
	// liveness work grows with (its compile time is super-linear in it).
	Weight uint64
}

// Budget bounds the shapes a module may have before it is compiled. A zero
// field means no limit for that measure.
type Budget struct {
	// MaxLocals caps one function's parameters plus locals.
	MaxLocals uint64
	// MaxBodyBytes caps one function body.
	MaxBodyBytes uint64
	// MaxCarried caps one function's Carried.
	MaxCarried uint64
	// MaxWeight caps one function's Weight.
	MaxWeight uint64
	// MaxModuleWeight caps the sum of Weight over the module's functions.
	MaxModuleWeight uint64
	// MaxModuleCarriedSq caps the sum over functions of Carried squared
	// (compile time grows about quadratically in one function's carried
	// values, linearly across functions).
	MaxModuleCarriedSq uint64
	// MaxCodeBytes caps the code section (all bodies together).
	MaxCodeBytes uint64
	// MaxFunctions caps the number of defined functions.
	MaxFunctions uint64
}

// DefaultBudget is the compile budget sandboxd applies. It was derived on a
// 2-core x86-64 machine with wazero v1.12 (TestMeasureCompileShapes
// measures; TestF16CompileBomb checks that the bombs below are over it):
//
//   - the F16 bomb (one loop updating N i32 locals, each read twice):
//     N=10,000 (carried 10k, weight 4e8) 0.27 s; N=20,000 (20k, 1.6e9)
//     0.93 s; N=30,000 4 s; N=90,000 56 s;
//   - nested loops over 1,000 locals, 500 deep (carried 500k, a 13 KB
//     module) 5.3 s; 100 nested loops with 1,000 block parameters (carried
//     100k, 6.7 KB) 11 s; 20k carried values compile in ~0.5 s whatever the
//     shape;
//   - 50,000 locals in straight-line code, 10,000 nested blocks, 20,000
//     values on the operand stack, 500 nested loops over the stack: ≤ 0.4 s;
//   - the repository's Go guests (1.8–11 MB): ≤ 21 locals and ≤ 21 carried
//     values per function, weight ≤ 2.1e5 per function and 2.4e7 per module.
//
// So no one function compiles for much over half a second on that machine,
// and the Go guests sit three orders of magnitude below every limit.
var DefaultBudget = Budget{
	MaxLocals:          50_000,
	MaxBodyBytes:       8 << 20,
	MaxCarried:         20_000,
	MaxWeight:          1_000_000_000,
	MaxModuleWeight:    3_000_000_000,
	MaxModuleCarriedSq: 1_000_000_000,
	MaxCodeBytes:       128 << 20,
	MaxFunctions:       1_000_000,
}

// ErrOverBudget is wrapped by the error CheckBudget returns for a module
// over its budget.
var ErrOverBudget = errors.New("over the compile budget")

// BudgetError says which function passed which limit.
type BudgetError struct {
	Func  uint32 // function index (imports first); for module-wide limits, 0
	Name  string // the function's name from the name section, if any
	Limit string // "locals", "body bytes", "locals × body bytes", "code bytes", "functions"
	Value uint64
	Max   uint64
}

func (e *BudgetError) Error() string {
	fn := ""
	switch e.Limit {
	case "code bytes", "functions", "loop weight in total", "carried values squared in total":
		fn = "the module"
	default:
		fn = fmt.Sprintf("function %d", e.Func)
		if e.Name != "" {
			fn += fmt.Sprintf(" %q", e.Name)
		}
	}
	return fmt.Sprintf("%s has %d %s, over the compile budget's %d (a shape that makes compilation super-linear)", fn, e.Value, e.Limit, e.Max)
}

// Unwrap makes BudgetError match ErrOverBudget.
func (e *BudgetError) Unwrap() error { return ErrOverBudget }

// Shapes returns the shape of every defined function, in index order.
func Shapes(b []byte) ([]FuncShape, error) {
	s, err := scanShapes(b, Budget{})
	return s, err
}

// CheckBudget reads the function shapes of b and returns a *BudgetError for
// the first limit of budget a function (or the module) passes. It reads the
// module once, in time linear in len(b), and never panics.
func CheckBudget(b []byte, budget Budget) error {
	_, err := scanShapes(b, budget)
	return err
}

func scanShapes(b []byte, budget Budget) ([]FuncShape, error) {
	var (
		typeParams []uint64 // params per type
		funcTypes  []uint32 // type per defined function
		imported   uint32
		shapes     []FuncShape
		over       *BudgetError
		nameSec    *Reader
	)
	for s, err := range sections(b) {
		if err != nil {
			return nil, err
		}
		end, size := s.end, uint64(s.end-s.body)
		sec := s.reader(b)
		switch s.id {
		case 0:
			if n, err := sec.Name(); err == nil && n == "name" {
				nameSec = sec
			}
		case 1:
			if typeParams, err = scanTypes(sec); err != nil {
				return nil, err
			}
		case 2:
			if imported, err = countFuncImports(sec); err != nil {
				return nil, err
			}
		case 3:
			n, err := sec.ULEB(32)
			if err != nil {
				return nil, err
			}
			if budget.MaxFunctions > 0 && n > budget.MaxFunctions {
				return nil, &BudgetError{Limit: "functions", Value: n, Max: budget.MaxFunctions}
			}
			if n > uint64(end-sec.off) {
				return nil, sec.Fail("function count past end")
			}
			funcTypes = make([]uint32, 0, n)
			for i := uint64(0); i < n; i++ {
				t, err := sec.ULEB(32)
				if err != nil {
					return nil, err
				}
				funcTypes = append(funcTypes, uint32(t))
			}
		case 10:
			// wazero v1.12's validator indexes the type list with a
			// function's type index unchecked (it panics on a type past
			// the list): refuse such a module here, before it is compiled.
			for i, t := range funcTypes {
				if uint64(t) >= uint64(len(typeParams)) {
					return nil, fmt.Errorf("function %d declares type %d, but the module defines %d types: the module is invalid (rebuild it)", imported+uint32(i), t, len(typeParams))
				}
			}
			if budget.MaxCodeBytes > 0 && size > budget.MaxCodeBytes {
				return nil, &BudgetError{Limit: "code bytes", Value: size, Max: budget.MaxCodeBytes}
			}
			n, err := sec.ULEB(32)
			if err != nil {
				return nil, err
			}
			if n != uint64(len(funcTypes)) {
				return nil, sec.Fail("code and function section counts differ")
			}
			shapes = make([]FuncShape, 0, n)
			var totalWeight, totalCarriedSq uint64
			for i := uint64(0); i < n; i++ {
				bodySize, err := sec.ULEB(32)
				if err != nil {
					return nil, err
				}
				if bodySize > uint64(end-sec.off) {
					return nil, sec.Fail("function body past end")
				}
				bodyEnd := sec.off + int(bodySize)
				body := &Reader{b: b[:bodyEnd], off: sec.off}
				locals, err := countLocals(body)
				if err != nil {
					return nil, err
				}
				if t := funcTypes[i]; uint64(t) < uint64(len(typeParams)) {
					locals += typeParams[t]
				}
				s := FuncShape{Index: imported + uint32(i), Locals: locals, BodyBytes: bodySize}
				if err := scanBody(body, &s, typeParams); err != nil {
					return nil, fmt.Errorf("function %d: %w", s.Index, err)
				}
				shapes = append(shapes, s)
				totalWeight = satAdd(totalWeight, s.Weight)
				totalCarriedSq = satAdd(totalCarriedSq, satMul(s.Carried, s.Carried))
				if over == nil {
					over = budget.check(s)
				}
				if over != nil {
					break // the first function over the budget is the answer
				}
				sec.off = bodyEnd
			}
			if over == nil && budget.MaxModuleWeight > 0 && totalWeight > budget.MaxModuleWeight {
				over = &BudgetError{Limit: "loop weight in total", Value: totalWeight, Max: budget.MaxModuleWeight}
			}
			if over == nil && budget.MaxModuleCarriedSq > 0 && totalCarriedSq > budget.MaxModuleCarriedSq {
				over = &BudgetError{Limit: "carried values squared in total", Value: totalCarriedSq, Max: budget.MaxModuleCarriedSq}
			}
		}
	}
	if over != nil {
		if nameSec != nil {
			over.Name = funcName(nameSec, over.Func)
		}
		return shapes, over
	}
	return shapes, nil
}

func (bu Budget) check(s FuncShape) *BudgetError {
	e := func(limit string, v, max uint64) *BudgetError {
		return &BudgetError{Func: s.Index, Limit: limit, Value: v, Max: max}
	}
	switch {
	case bu.MaxLocals > 0 && s.Locals > bu.MaxLocals:
		return e("locals", s.Locals, bu.MaxLocals)
	case bu.MaxBodyBytes > 0 && s.BodyBytes > bu.MaxBodyBytes:
		return e("body bytes", s.BodyBytes, bu.MaxBodyBytes)
	case bu.MaxCarried > 0 && s.Carried > bu.MaxCarried:
		return e("values carried around loops", s.Carried, bu.MaxCarried)
	case bu.MaxWeight > 0 && s.Weight > bu.MaxWeight:
		return e("loop weight (carried values × instructions in the loop)", s.Weight, bu.MaxWeight)
	}
	return nil
}

// scanTypes returns the parameter count of every function type.
func scanTypes(r *Reader) ([]uint64, error) {
	n, err := r.ULEB(32)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, r.Fail("type count past end")
	}
	out := make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		form, err := r.Byte()
		if err != nil {
			return nil, err
		}
		if form != 0x60 {
			return nil, r.Fail("unsupported type form")
		}
		params, err := r.ULEB(32)
		if err != nil {
			return nil, err
		}
		if err := r.skip(params); err != nil {
			return nil, err
		}
		results, err := r.ULEB(32)
		if err != nil {
			return nil, err
		}
		if err := r.skip(results); err != nil {
			return nil, err
		}
		out = append(out, params)
	}
	return out, nil
}

// skip skips n value types of one byte each (the MVP and reference-types
// encodings; typed function references are not enabled in sandboxd).
func (r *Reader) skip(n uint64) error {
	if n > uint64(len(r.b)-r.off) {
		return r.Fail("value types past end")
	}
	r.off += int(n)
	return nil
}

func countFuncImports(r *Reader) (uint32, error) {
	m := &Module{}
	if err := parseImports(r, m); err != nil {
		return 0, err
	}
	var n uint32
	for _, im := range m.Imports {
		if im.Kind == KindFunc {
			n++
		}
	}
	return n, nil
}

// countLocals reads a body's local declarations and sums their counts.
func countLocals(r *Reader) (uint64, error) {
	groups, err := r.ULEB(32)
	if err != nil {
		return 0, err
	}
	var total uint64
	for g := uint64(0); g < groups; g++ {
		c, err := r.ULEB(32)
		if err != nil {
			return 0, err
		}
		if _, err := r.Byte(); err != nil {
			return 0, err
		}
		total += c
		if total > 1<<33 {
			return 0, r.Fail("too many locals")
		}
	}
	return total, nil
}

// funcName looks idx up in the name section's function names (subsection
// 1); "" when absent or unreadable.
func funcName(r *Reader, idx uint32) string {
	for r.off < len(r.b) {
		id, err := r.Byte()
		if err != nil {
			return ""
		}
		size, err := r.ULEB(32)
		if err != nil || size > uint64(len(r.b)-r.off) {
			return ""
		}
		end := r.off + int(size)
		if id == 1 {
			sub := &Reader{b: r.b[:end], off: r.off}
			n, err := sub.ULEB(32)
			if err != nil {
				return ""
			}
			for i := uint64(0); i < n; i++ {
				fi, err := sub.ULEB(32)
				if err != nil {
					return ""
				}
				name, err := sub.Name()
				if err != nil {
					return ""
				}
				if uint32(fi) == idx {
					if len(name) > 128 {
						name = name[:128]
					}
					return name
				}
			}
			return ""
		}
		r.off = end
	}
	return ""
}

// scanBody walks one function body's instructions (r at the first
// instruction, after the local declarations) with ScanExpr, reading them as
// wazero does (AsWazero), and fills in the instruction and loop measures of
// s, in time linear in the body's size.
func scanBody(r *Reader, s *FuncShape, typeParams []uint64) error {
	type frame struct {
		loop                    bool
		params                  uint64 // values the block type carries in
		startInstr, startAccess uint64 // counters when the frame opened
	}
	var stack []frame
	var accesses uint64 // local.get/set/tee so far
	var bad error
	err := ScanExpr(r, AsWazero, func(op Op, start, end int) {
		if bad != nil {
			return
		}
		s.Instrs++
		switch op {
		case OpBlock, OpLoop, OpIf:
			params, err := blocktypeParams(NewReader(r.b[:end], start+1), typeParams)
			if err != nil {
				bad = err
				return
			}
			stack = append(stack, frame{loop: op == OpLoop, params: params, startInstr: s.Instrs, startAccess: accesses})
			if op == OpLoop {
				s.Loops++
			}
			s.MaxDepth = max(s.MaxDepth, uint64(len(stack)))
		case OpEnd:
			if len(stack) == 0 {
				return // the function's end
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if f.loop {
				carried := min(s.Locals, accesses-f.startAccess) + f.params
				s.Carried = satAdd(s.Carried, carried)
				s.Weight = satAdd(s.Weight, satMul(carried, s.Instrs-f.startInstr))
			}
		case OpOther:
			if c := r.b[start]; c >= 0x20 && c <= 0x22 { // local.get/set/tee
				accesses++
			}
		}
	})
	switch {
	case bad != nil:
		return bad
	case err != nil:
		return err
	case r.off != len(r.b):
		return r.Fail("code after the function's end")
	}
	return nil
}

// blocktypeParams reads the block type of block, loop, if or try_table
// (which ScanExpr has read already) and returns how many values it takes.
func blocktypeParams(r *Reader, typeParams []uint64) (uint64, error) {
	if c := r.b[r.off]; c == 0x40 || IsValtype(c) {
		return 0, nil
	}
	idx, err := r.SLEB(33)
	if err != nil {
		return 0, err
	}
	if idx < 0 || idx >= int64(len(typeParams)) {
		return 0, r.Fail("bad block type")
	}
	return typeParams[idx], nil
}

// satAdd and satMul saturate at the largest uint64 instead of wrapping, so a
// crafted module cannot wrap a measure back under its limit.
func satAdd(a, b uint64) uint64 {
	if c := a + b; c >= a {
		return c
	}
	return ^uint64(0)
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}
