package fuel

import (
	"fmt"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// bounds are the indices an expression may use: globals below globals
// (the module's own, imported and defined), locals below locals (parameters
// and declared locals; 0 for constant expressions).
type bounds struct {
	globals uint32
	locals  uint64
}

// checker says where checks go; nil means an expression that gets none
// (initialisers). stateful, when not empty, lists the imports before whose
// direct calls the dirty global is set to 1.
//
// local, when not negative, is the index of an i64 local that holds the
// counter inside the function (transformExpr sets it to -1 for a function
// it cannot use it in): see appendLocal.
type checker struct {
	fuel, limit, refill, dirty uint32
	stateful                   map[uint32]bool
	local                      int64
	bulk                       *helpers // the module's bulk and growth helpers
	plainLoops                 bool     // never version loops (options)
	plainLeaves                bool     // check leaves as other functions (options)
	// params and groups are the function's parameter types and local
	// declarations (localType).
	params []byte
	groups []LocalGroup
}

// localType returns the value type of local idx of the function, or 0 when
// it has none (an index beyond its locals).
func (c *checker) localType(idx uint32) byte {
	if int64(idx) < int64(len(c.params)) {
		return c.params[idx]
	}
	n := uint64(idx) - uint64(len(c.params))
	for _, g := range c.groups {
		if n < uint64(g.Count) {
			return g.Type
		}
		n -= uint64(g.Count)
	}
	return 0
}

// transformExpr returns expr with function indices renumbered and, when chk
// is not nil, checks inserted at its start and after every loop header,
// and the number of checks.
//
// It refuses (ErrMalformed) an expression that names a global or local
// outside bnd: such a module is invalid, but after the pass adds its own
// globals and local the index would be valid and name the fuel counter, the
// floor or the dirty flag, letting the guest refill its own fuel.
func transformExpr(expr []byte, remap func(uint32) uint32, chk *checker, bnd bounds) ([]byte, int, error) {
	// Pass 1: the cost of each segment and the edits: checks after loop
	// headers, charges after the ends of blocks and ifs, and function
	// indices to rewrite, in order. A level is the function's body or a
	// loop's (level 0 is the function, then one per loop in order of
	// appearance); its code is cut into segments where control can arrive
	// other than from the instruction before: its header, and the end of
	// every block, if and try_table in it (a branch's or a catch's target,
	// or an if's false path). The level's check pays its first segment
	// (costs[level]); every other segment is paid by a charge at its start
	// (see Charge per segment).
	type edit struct {
		start, end int
		kind       editKind
		level      int    // editCheck, editLoopOpen, editLoopClose: the loop's level; editCharge: the segment
		helper     uint32 // editHelper: the helper's function index
		branch     []byte // editBranch: the instruction with its depths shifted
		versioned  bool   // editCheck: the loop is versioned
	}
	costs := []int64{0}
	// segOf[level] is the segment of level the scan is in (indexed like
	// costs; -1 at the indices of segments that are not a level's first).
	segOf := []int{0}
	var edits []edit
	tryTable := false
	// calls reports that the expression calls out (a call of any kind, or
	// a bulk or growth instruction, which becomes a call of its helper);
	// loops that it has a loop. A function with neither is a leaf (see
	// Leaf functions in the package documentation).
	calls, loops := false, false
	// The open frames: the level each belongs to and, for a loop the pass
	// may version (see appendLoopOpen), true.
	type frame struct {
		level     int
		versioned bool
		loop      bool
	}
	stack := []frame{{}}
	// written[level] lists the locals that a versioned loop's body (nested
	// loops included) sets, each once (see appendLoopClose).
	written := map[int][]uint32{}
	seen := map[[2]int64]bool{}
	r := wasmbin.NewReader(expr, 0)
	// Edits of kind editSync write the global from the local before an
	// instruction that leaves the function or calls out of it; editReload
	// reloads the local after a call. They apply only to a function that
	// keeps its counter in a local.
	sync := func(at int) { edits = append(edits, edit{start: at, end: at, kind: editSync}) }
	callOut := func(at int) { calls = true; sync(at) }
	var bad error
	err := wasmbin.ScanExpr(r, wasmbin.Refuse, func(k wasmbin.Op, start, end int) {
		cur := stack[len(stack)-1].level
		op := expr[start]
		switch k {
		case wasmbin.OpOther:
			costs[segOf[cur]] += opWeight(expr[start:end])
			switch op {
			case 0x20, 0x21, 0x22, 0x23, 0x24: // local.get/set/tee, global.get/set
				ir := wasmbin.NewReader(expr[:end], start+1)
				idx, err := ir.U32()
				if err == nil && op >= 0x23 && idx >= bnd.globals {
					err = fmt.Errorf("%w: global %d does not exist", ErrMalformed, idx)
				} else if err == nil && op < 0x23 && uint64(idx) >= bnd.locals {
					err = fmt.Errorf("%w: local %d does not exist", ErrMalformed, idx)
				}
				if err != nil && bad == nil {
					bad = err
				}
				if err == nil && (op == 0x21 || op == 0x22) {
					for _, f := range stack {
						if f.versioned && !seen[[2]int64{int64(f.level), int64(idx)}] {
							seen[[2]int64{int64(f.level), int64(idx)}] = true
							written[f.level] = append(written[f.level], idx)
						}
					}
				}
			case 0x11: // call_indirect
				callOut(start)
				edits = append(edits, edit{start: end, end: end, kind: editReload})
			case 0x13: // return_call_indirect
				callOut(start)
			case 0x0f: // return
				sync(start)
			case 0x0c, 0x0d, 0x0e: // br, br_if, br_table
				if branchesOut(expr[start+1:end], op, len(stack)-1) {
					sync(start)
				}
				shifted, err := shiftBranch(expr[start:end], func(i int) bool { return stack[i].versioned }, len(stack))
				if err != nil && bad == nil {
					bad = err
				}
				if shifted != nil {
					edits = append(edits, edit{start: start, end: end, kind: editBranch, branch: shifted})
				}
			case 0x40, 0xfc: // memory.grow, bulk and table instructions
				if chk == nil || chk.bulk == nil || !isBulk(expr, start) {
					break
				}
				f, err := chk.bulk.helperFor(expr[start:end])
				if err != nil {
					if bad == nil {
						bad = err
					}
					break
				}
				callOut(start)
				edits = append(edits, edit{start: start, end: end, kind: editHelper, helper: f},
					edit{start: end, end: end, kind: editReload})
			}
		case wasmbin.OpFunc:
			costs[segOf[cur]]++
			if op != 0xd2 { // call, return_call
				callOut(start)
			}
			edits = append(edits, edit{start: start, end: end, kind: editFunc})
			if op == 0x10 {
				edits = append(edits, edit{start: end, end: end, kind: editReload})
			}
		case wasmbin.OpIf:
			costs[segOf[cur]]++
			stack = append(stack, frame{level: cur})
		case wasmbin.OpBlock:
			stack = append(stack, frame{level: cur})
			if op == 0x1f {
				tryTable = true
			}
		case wasmbin.OpLoop:
			loops = true
			level := len(costs)
			v := chk != nil && versionable(expr[start+1:end])
			stack = append(stack, frame{level: level, versioned: v, loop: true})
			if v {
				edits = append(edits, edit{start: start, end: start, kind: editLoopOpen, level: level})
			}
			edits = append(edits, edit{start: end, end: end, kind: editCheck, level: level, versioned: v})
			costs = append(costs, 0)
			segOf = append(segOf, level)
		case wasmbin.OpEnd:
			if len(stack) == 1 { // the function's own end: it returns
				sync(start)
			}
			f := stack[len(stack)-1]
			if f.versioned {
				edits = append(edits, edit{start: end, end: end, kind: editLoopClose, level: f.level})
			}
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && op == 0x0b && !f.loop {
				// The end of a block, if or try_table: a new segment of
				// the enclosing level starts after it.
				s := len(costs)
				costs = append(costs, 0)
				segOf = append(segOf, -1)
				segOf[f.level] = s
				edits = append(edits, edit{start: end, end: end, kind: editCharge, level: s})
			}
		}
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, 0, err
	}
	if !r.EOF() {
		return nil, 0, r.Fail("trailing bytes after an expression")
	}
	// Pass 2: copy with the edits applied.
	if chk != nil && tryTable {
		// A caught exception reaches its handler without passing the
		// reload after the call that threw: keep the counter in the
		// global only.
		chk.local = -1
	}
	// Loops are versioned only in a function that keeps its count in a
	// local (where the check's fast path touches no memory and the call is
	// what costs); elsewhere the versioning edits are left out.
	version := chk != nil && chk.local >= 0 && !chk.plainLoops
	// A leaf keeps the counter itself in its local, not the fuel above the
	// floor, and has no check: its entry loads the counter less the first
	// segment's cost, every way out stores the local back.
	leaf := chk != nil && chk.local >= 0 && !calls && !loops && !chk.plainLeaves
	out := make([]byte, 0, len(expr)+len(costs)*48)
	checks := 0
	switch {
	case leaf:
		out = chk.appendLeafEntry(out, max(costs[0], 1))
	case chk != nil:
		if chk.local >= 0 {
			out = chk.reload(out)
		}
		out = chk.appendEntry(out, costs[0])
		checks++
	}
	// The copies of locals on the refill paths of versioned loops
	// (appendLoopClose) are bounded by the size of the body: at most one
	// per byte of it in all.
	copyBudget := len(expr) / 4
	prev := 0
	for _, e := range edits {
		out = append(out, expr[prev:e.start]...)
		prev = e.end
		switch e.kind {
		case editCheck:
			if chk == nil {
				continue
			}
			checks++
			if version && e.versioned {
				out = chk.appendLoopCheck(out, costs[e.level])
			} else {
				out = chk.append(out, costs[e.level])
			}
		case editCharge:
			if chk != nil && costs[e.level] > 0 {
				out = chk.appendCharge(out, costs[e.level])
			}
		case editLoopOpen:
			if version {
				out = appendLoopOpen(out, expr[e.start+1])
			}
		case editLoopClose:
			if version {
				var copies []uint32
				if w := written[e.level]; len(w) <= copyBudget {
					copies, copyBudget = w, copyBudget-len(w)
				}
				out = chk.appendLoopClose(out, costs[e.level], copies)
			}
		case editBranch:
			if version {
				out = append(out, e.branch...)
			} else {
				out = append(out, expr[e.start:e.end]...)
			}
		case editHelper:
			out = wasmbin.AppendULEB(append(out, 0x10), uint64(e.helper))
		case editReload, editSync:
			switch {
			case chk == nil || chk.local < 0:
			case leaf: // a leaf has no call, so no reload: a way out
				out = chk.leafSync(out)
			case e.kind == editReload:
				out = chk.reload(out)
			default:
				out = chk.sync(out)
			}
		case editFunc:
			ir := wasmbin.NewReader(expr[:e.end], e.start+1)
			f, err := ir.U32()
			if err != nil {
				return nil, 0, err
			}
			if chk != nil && expr[e.start] == 0x10 && chk.stateful[f] {
				out = append(out, 0x41, 0x01, 0x24) // i32.const 1, global.set $dirty
				out = wasmbin.AppendULEB(out, uint64(chk.dirty))
			}
			out = append(out, expr[e.start])
			out = wasmbin.AppendULEB(out, uint64(remap(f)))
		}
	}
	out = append(out, expr[prev:]...)
	return out, checks, nil
}

// editKind says what an edit of transformExpr does.
type editKind uint8

const (
	editCheck     editKind = iota // insert a loop's check after its header
	editFunc                      // rewrite a function index (call, return_call, ref.func)
	editHelper                    // replace a bulk or growth instruction by a call of its helper
	editSync                      // write the global from the local
	editReload                    // reload the local from the global
	editBranch                    // shift the label depths of a branch out of versioned loops
	editLoopOpen                  // open the frames around a versioned loop
	editLoopClose                 // close them, with the refill path between
	editCharge                    // pay a segment after the end of a block or if
)

// appendCharge appends the charge of a segment that does not start at a
// level's header: the count drops by cost, with no comparison (the next
// check, at a loop header or a function entry, sees the deficit).
func (c *checker) appendCharge(b []byte, cost int64) []byte {
	if c.local >= 0 {
		b = wasmbin.AppendULEB(append(b, 0x20), uint64(c.local)) // local.get $d
		b = wasmbin.AppendSLEB(append(b, 0x42), cost)            // i64.const
		b = append(b, 0x7d, 0x21)                                // i64.sub, local.set
		return wasmbin.AppendULEB(b, uint64(c.local))
	}
	b = wasmbin.AppendULEB(append(b, 0x23), uint64(c.fuel)) // global.get $fuel
	b = wasmbin.AppendSLEB(append(b, 0x42), cost)           // i64.const
	b = append(b, 0x7d, 0x24)                               // i64.sub, global.set
	return wasmbin.AppendULEB(b, uint64(c.fuel))
}

// versionable reports whether a loop with block type bt (the loop
// instruction's immediate) can be versioned: bt is empty or one value type,
// so the loop takes no parameters.
func versionable(bt []byte) bool {
	return len(bt) == 1 && (bt[0] == 0x40 || wasmbin.IsValtype(bt[0]))
}

// shiftBranch returns the br, br_if or br_table ins with every label depth
// raised by 3 for each versioned frame between the branch and its target,
// or nil when no depth changes. n is the number of open frames (the
// function's own is frame 0) and versioned(i) reports whether frame i is a
// versioned loop. A depth beyond the function's frame is refused
// (ErrMalformed): the module is invalid, and after the pass adds frames
// such a branch could name one of them.
func shiftBranch(ins []byte, versioned func(i int) bool, n int) ([]byte, error) {
	r := wasmbin.NewReader(ins, 1)
	cnt := uint32(1)
	if ins[0] == 0x0e {
		c, err := r.Count(1)
		if err != nil {
			return nil, err
		}
		cnt = c + 1
	}
	out := []byte{ins[0]}
	if ins[0] == 0x0e {
		out = wasmbin.AppendULEB(out, uint64(cnt-1))
	}
	changed := false
	for i := uint32(0); i < cnt; i++ {
		l, err := r.U32()
		if err != nil {
			return nil, err
		}
		target := n - 1 - int(l)
		if int64(l) >= int64(n) {
			return nil, fmt.Errorf("%w: branch depth %d outside the function", ErrMalformed, l)
		}
		shift := 0
		for f := target + 1; f < n; f++ {
			if versioned(f) {
				shift += 3
			}
		}
		if shift != 0 {
			changed = true
		}
		out = wasmbin.AppendULEB(out, uint64(l)+uint64(shift))
	}
	if !changed {
		return nil, nil
	}
	return out, nil
}

// appendLoopOpen opens $exit, $outer and $refill before a versioned loop of
// block type bt.
func appendLoopOpen(b []byte, bt byte) []byte {
	return append(b, 0x02, bt, 0x03, bt, 0x02, 0x40)
}

// appendLoopCheck appends a versioned loop's check: local.get $d; i64.const
// cost; i64.sub; local.tee $d; i64.const 0; i64.lt_s; br_if 1 ($refill).
func (c *checker) appendLoopCheck(b []byte, cost int64) []byte {
	b = wasmbin.AppendULEB(append(b, 0x20), uint64(c.local)) // local.get $d
	b = append(b, 0x42)                                      // i64.const
	b = wasmbin.AppendSLEB(b, max(cost, 1))
	b = append(b, 0x7d, 0x22) // i64.sub, local.tee
	b = wasmbin.AppendULEB(b, uint64(c.local))
	return append(b, 0x42, 0x00, 0x53, 0x0d, 0x01) // i64.const 0, i64.lt_s, br_if 1
}

// appendLoopClose appends what follows a versioned loop's end: br $exit,
// the end of $refill, the refill path and the ends of $outer and $exit.
func (c *checker) appendLoopClose(b []byte, cost int64, copies []uint32) []byte {
	gget := func(b []byte, g uint32) []byte { return wasmbin.AppendULEB(append(b, 0x23), uint64(g)) }
	b = append(b, 0x0c, 0x02, 0x0b) // br 2 ($exit), end ($refill)
	b = c.appendSave(b, copies)
	b = c.sync(b)
	b = wasmbin.AppendULEB(append(b, 0x10), uint64(c.refill)) // call $refill
	b = gget(gget(b, c.fuel), c.limit)
	b = append(b, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.lt_s, if, unreachable, end
	b = gget(gget(b, c.fuel), c.limit)
	b = append(b, 0x7d, 0x42) // i64.sub, i64.const
	b = wasmbin.AppendSLEB(b, max(cost, 1))
	b = append(b, 0x7c, 0x21) // i64.add, local.set $d
	b = wasmbin.AppendULEB(b, uint64(c.local))
	b = c.appendRestore(b, copies)
	return append(b, 0x0c, 0x00, 0x0b, 0x0b) // br 0 ($outer), end ($outer), end ($exit)
}

// carried reports whether appendSave carries a local of type t: a number
// or a vector (a reference cannot be copied by an operation).
func carried(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b:
		return true
	}
	return false
}

// appendSave pushes, for each local of ls of a number or vector type (see
// carried), a new value holding its bits, 64 bits wide or more: an i32 or
// f32 zero-extended to an i64 (f32 through i32.reinterpret_f32), an i64 or'd
// with 0, an f64 copysign'd with itself (no arithmetic: no NaN is quieted),
// a v128 or'd with itself. appendRestore pops them back into the locals.
// Between the two comes a call of $refill: what is live across it is then
// these values, defined on the refill path, not the locals' own (see Loop
// versioning).
func (c *checker) appendSave(b []byte, ls []uint32) []byte {
	for _, l := range ls {
		t := c.localType(l)
		if !carried(t) {
			continue
		}
		b = wasmbin.AppendULEB(append(b, 0x20), uint64(l)) // local.get l
		switch t {
		case 0x7f:
			b = append(b, 0xad) // i64.extend_i32_u
		case 0x7e:
			b = append(b, 0x42, 0x00, 0x84) // i64.const 0; i64.or
		case 0x7d:
			b = append(b, 0xbc, 0xad) // i32.reinterpret_f32; i64.extend_i32_u
		case 0x7c:
			b = wasmbin.AppendULEB(append(b, 0x20), uint64(l))
			b = append(b, 0xa6) // local.get l; f64.copysign
		case 0x7b:
			b = wasmbin.AppendULEB(append(b, 0x20), uint64(l))
			b = append(b, 0xfd, 0x50) // local.get l; v128.or
		}
	}
	return b
}

// appendRestore pops what appendSave pushed for ls back into the locals,
// the last first.
func (c *checker) appendRestore(b []byte, ls []uint32) []byte {
	for i := len(ls) - 1; i >= 0; i-- {
		l := ls[i]
		switch c.localType(l) {
		case 0x7f:
			b = append(b, 0xa7) // i32.wrap_i64
		case 0x7d:
			b = append(b, 0xa7, 0xbe) // i32.wrap_i64; f32.reinterpret_i32
		case 0x7e, 0x7c, 0x7b:
		default:
			continue
		}
		b = wasmbin.AppendULEB(append(b, 0x21), uint64(l)) // local.set l
	}
	return b
}

// appendEntry appends the check at a function's entry: the plain check
// (append) whose refill path, in a function that keeps its count in a
// local, carries the parameters across the call of $refill (appendSave),
// when there are at most maxCarriedParams of them.
func (c *checker) appendEntry(b []byte, cost int64) []byte {
	if c.local < 0 || len(c.params) == 0 || len(c.params) > maxCarriedParams {
		return c.append(b, cost)
	}
	ps := make([]uint32, len(c.params))
	for i := range ps {
		ps[i] = uint32(i)
	}
	return c.appendLocalCarrying(b, max(cost, 1), ps)
}

// appendLeafEntry appends a leaf's entry: its local is set to the counter
// less cost, the first segment's (global.get $fuel; i64.const cost;
// i64.sub; local.set $d), with no comparison: a leaf runs each of its
// instructions at most once, and the caller's next check (or, for a call
// from the host, the end of the call) sees a deficit it leaves.
func (c *checker) appendLeafEntry(b []byte, cost int64) []byte {
	b = wasmbin.AppendULEB(append(b, 0x23), uint64(c.fuel)) // global.get $fuel
	b = wasmbin.AppendSLEB(append(b, 0x42), cost)           // i64.const
	b = append(b, 0x7d, 0x21)                               // i64.sub, local.set
	return wasmbin.AppendULEB(b, uint64(c.local))
}

// leafSync writes a leaf's local back to the counter before every way out
// of it (local.get $d; global.set $fuel).
func (c *checker) leafSync(b []byte) []byte {
	b = wasmbin.AppendULEB(append(b, 0x20), uint64(c.local)) // local.get $d
	return wasmbin.AppendULEB(append(b, 0x24), uint64(c.fuel))
}

// maxCarriedParams bounds the parameters the entry check carries across
// refill (appendEntry), so that the code it adds per function is bounded
// whatever the type.
const maxCarriedParams = 16

// opWeight is the fuel an instruction costs: 1, or more for the
// instructions that take several times longer than the rest (measured by
// TestSliceTime), so that a Slice of fuel is about a millisecond whatever
// the mix.
func opWeight(ins []byte) int64 {
	switch ins[0] {
	case 0x6d, 0x6e, 0x6f, 0x70, 0x7f, 0x80, 0x81, 0x82: // integer division and remainder
		return 3
	case 0x91, 0x95, 0x9f, 0xa3: // f32/f64 sqrt and div
		return 2
	case 0x11, 0x13: // call_indirect, return_call_indirect
		return 4
	case 0xfd:
		switch ins[1] {
		case 0xe3, 0xe7, 0xef, 0xf3: // f32x4/f64x2 sqrt and div
			return 4
		}
	}
	return 1
}

// reload sets the function's local to the fuel left above the floor
// (fuel - limit): at function entry and after every call (the callee spent
// from the global). The guest only runs while fuel >= limit, so the
// difference is between 0 and a Slice and never overflows.
func (c *checker) reload(b []byte) []byte {
	b = wasmbin.AppendULEB(append(b, 0x23), uint64(c.fuel))  // global.get $fuel
	b = wasmbin.AppendULEB(append(b, 0x23), uint64(c.limit)) // global.get $limit
	b = append(b, 0x7d)                                      // i64.sub
	return wasmbin.AppendULEB(append(b, 0x21), uint64(c.local))
}

// sync writes the count back to the global (local + limit): before every
// call (the callee and the host read the global) and before every way out
// of the function (return, a branch to the function's label, its end).
func (c *checker) sync(b []byte) []byte {
	b = wasmbin.AppendULEB(append(b, 0x20), uint64(c.local)) // local.get $d
	b = wasmbin.AppendULEB(append(b, 0x23), uint64(c.limit)) // global.get $limit
	b = append(b, 0x7c)                                      // i64.add
	return wasmbin.AppendULEB(append(b, 0x24), uint64(c.fuel))
}

// appendLocal appends the check of a function that keeps its count in a
// local $d, the fuel left above the floor:
//
//	local.get $d; i64.const C; i64.sub; local.tee $d
//	i64.const 0; i64.lt_s
//	if
//	  local.get $d; global.get $limit; i64.add; global.set $fuel
//	  call $refill
//	  global.get $fuel; global.get $limit; i64.lt_s
//	  if unreachable end
//	  global.get $fuel; global.get $limit; i64.sub; local.set $d
//	end
//
// A loop that calls nothing so keeps its count in a register and touches
// no memory at its check: no store and reload of the counter, no load of
// the floor. The global is exact wherever the host reads it (refill, after
// a call into the guest returns, a fuel trap); after a trap the guest
// raised itself (out-of-bounds access, division by zero) it misses what the
// trapping function spent since its last sync, so the fuel reported for
// such a failed call can be lower than the work done.
func (c *checker) appendLocal(b []byte, cost int64) []byte {
	return c.appendLocalCarrying(b, cost, nil)
}

// appendLocalCarrying is appendLocal with the locals ls carried across the
// call of $refill (appendSave, appendRestore).
func (c *checker) appendLocalCarrying(b []byte, cost int64, ls []uint32) []byte {
	gget := func(b []byte, g uint32) []byte { return wasmbin.AppendULEB(append(b, 0x23), uint64(g)) }
	b = wasmbin.AppendULEB(append(b, 0x20), uint64(c.local)) // local.get $d
	b = append(b, 0x42)                                      // i64.const
	b = wasmbin.AppendSLEB(b, cost)
	b = append(b, 0x7d, 0x22) // i64.sub, local.tee
	b = wasmbin.AppendULEB(b, uint64(c.local))
	b = append(b, 0x42, 0x00, 0x53, 0x04, 0x40) // i64.const 0, i64.lt_s, if (empty)
	b = c.appendSave(b, ls)
	b = c.sync(b)
	b = append(b, 0x10) // call
	b = wasmbin.AppendULEB(b, uint64(c.refill))
	b = gget(gget(b, c.fuel), c.limit)
	b = append(b, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.lt_s, if, unreachable, end
	b = c.reload(b)
	b = c.appendRestore(b, ls)
	return append(b, 0x0b)
}

// branchesOut reports whether the br, br_if or br_table with immediates
// imm targets the function's own label (relative depth depth), which
// returns from it.
func branchesOut(imm []byte, op byte, depth int) bool {
	r := wasmbin.NewReader(imm, 0)
	n := uint32(1)
	if op == 0x0e {
		c, err := r.Count(1)
		if err != nil {
			return true
		}
		n = c + 1
	}
	for i := uint32(0); i < n; i++ {
		l, err := r.U32()
		if err != nil || int64(l) == int64(depth) {
			return true
		}
	}
	return false
}

// append appends a check: fuel -= cost; if fuel < limit { refill(); if
// fuel < limit { unreachable } }.
func (c *checker) append(b []byte, cost int64) []byte {
	cost = max(cost, 1)
	if c.local >= 0 {
		return c.appendLocal(b, cost)
	}
	get := func(b []byte, g uint32) []byte { return wasmbin.AppendULEB(append(b, 0x23), uint64(g)) }
	b = get(b, c.fuel)
	b = append(b, 0x42) // i64.const
	b = wasmbin.AppendSLEB(b, cost)
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = wasmbin.AppendULEB(b, uint64(c.fuel))
	b = get(get(b, c.fuel), c.limit)
	b = append(b, 0x53, 0x04, 0x40, 0x10) // i64.lt_s, if (empty), call
	b = wasmbin.AppendULEB(b, uint64(c.refill))
	b = get(get(b, c.fuel), c.limit)
	// i64.lt_s, if (empty), unreachable, end, end
	return append(b, 0x53, 0x04, 0x40, 0x00, 0x0b, 0x0b)
}
