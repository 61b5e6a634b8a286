package wasmbin

import "fmt"

// scanBody walks one function body's instructions (r at the first
// instruction, after the local declarations) and fills in the instruction
// and loop measures of s, in time linear in the body's size. It reads
// immediates as wazero v1.12 does (one-byte sub-opcodes after the 0xfd and
// 0xfe prefixes) and refuses opcodes it does not know, so nothing can hide a
// loop from it that the compiler would see.
func scanBody(r *reader, s *FuncShape, typeParams []uint64) error {
	type frame struct {
		loop                    bool
		params                  uint64 // values the block type carries in
		startInstr, startAccess uint64 // counters when the frame opened
	}
	var stack []frame
	var accesses uint64 // local.get/set/tee so far
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		s.Instrs++
		switch {
		case op == 0x02, op == 0x03, op == 0x04, op == 0x1f: // block, loop, if, try_table
			params, err := r.blocktypeParams(typeParams)
			if err != nil {
				return err
			}
			if op == 0x1f {
				if err := r.catches(); err != nil {
					return err
				}
			}
			stack = append(stack, frame{loop: op == 0x03, params: params, startInstr: s.Instrs, startAccess: accesses})
			if op == 0x03 {
				s.Loops++
			}
			s.MaxDepth = max(s.MaxDepth, uint64(len(stack)))
			if len(stack) > maxDepth {
				return r.fail("blocks nested too deeply")
			}
		case op == 0x0b: // end
			if len(stack) == 0 {
				if r.off != len(r.b) {
					return r.fail("code after the function's end")
				}
				return nil
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if f.loop {
				carried := min(s.Locals, accesses-f.startAccess) + f.params
				s.Carried = satAdd(s.Carried, carried)
				s.Weight = satAdd(s.Weight, satMul(carried, s.Instrs-f.startInstr))
			}
		case op >= 0x20 && op <= 0x22: // local.get/set/tee
			if _, err := r.uleb(32); err != nil {
				return err
			}
			accesses++
		default:
			if err := r.skipImmediates(op); err != nil {
				return err
			}
		}
	}
}

// catches skips try_table's catch clauses.
func (r *reader) catches() error {
	n, err := r.uleb(32)
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		ck, err := r.byte()
		if err != nil {
			return err
		}
		k := uint64(1)
		if ck < 2 {
			k = 2
		}
		if err := r.u32s(k); err != nil {
			return err
		}
	}
	return nil
}

// maxDepth matches the fuel pass's nesting limit.
const maxDepth = 1 << 14

// blocktypeParams reads a block type and returns how many values it takes.
func (r *reader) blocktypeParams(typeParams []uint64) (uint64, error) {
	if r.off < len(r.b) && (r.b[r.off] == 0x40 || simpleValtype(r.b[r.off])) {
		r.off++
		return 0, nil
	}
	idx, err := r.sleb33()
	if err != nil {
		return 0, err
	}
	if idx < 0 || idx >= int64(len(typeParams)) {
		return 0, r.fail("bad block type")
	}
	return typeParams[idx], nil
}

func (r *reader) sleb33() (int64, error) {
	var v int64
	var shift uint
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
		if shift >= 35 {
			return 0, r.fail("LEB128 too long")
		}
	}
}

func simpleValtype(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
		return true
	}
	return false
}

func (r *reader) skipN(n int) error {
	if n > len(r.b)-r.off {
		return r.fail("immediate past end")
	}
	r.off += n
	return nil
}

func (r *reader) u32s(n uint64) error {
	for i := uint64(0); i < n; i++ {
		if _, err := r.uleb(32); err != nil {
			return err
		}
	}
	return nil
}

// skipImmediates skips the immediates of every opcode but block, loop, if,
// end and local.*; unknown opcodes are an error.
func (r *reader) skipImmediates(op byte) error {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0f, op == 0x1a, op == 0x1b, op == 0x0a, op == 0xd1:
		return nil
	case op == 0x08, op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op == 0xd2, op >= 0x23 && op <= 0x26:
		return r.u32s(1)
	case op == 0x11, op == 0x13:
		return r.u32s(2)
	case op == 0x0e: // br_table
		n, err := r.uleb(32)
		if err != nil {
			return err
		}
		if n > uint64(len(r.b)-r.off) {
			return r.fail("br_table past end")
		}
		return r.u32s(n + 1)
	case op == 0x1c: // select t*
		return r.skipN(2)
	case op >= 0x28 && op <= 0x3e:
		return r.u32s(2)
	case op == 0x3f, op == 0x40, op == 0xd0:
		return r.skipN(1)
	case op == 0x41, op == 0x42:
		_, err := r.uleb(64)
		return err
	case op == 0x43:
		return r.skipN(4)
	case op == 0x44:
		return r.skipN(8)
	case op >= 0x45 && op <= 0xc4:
		return nil
	case op == 0xfc:
		sub, err := r.uleb(32)
		if err != nil {
			return err
		}
		switch {
		case sub <= 7:
			return nil
		case sub == 8:
			return r.skipN1(r.u32s(1))
		case sub == 9, sub == 13, sub >= 15 && sub <= 17:
			return r.u32s(1)
		case sub == 10:
			return r.skipN(2)
		case sub == 11:
			return r.skipN(1)
		case sub == 12, sub == 14:
			return r.u32s(2)
		}
		return r.fail(fmt.Sprintf("unknown opcode 0xfc %d", sub))
	case op == 0xfd: // wazero v1.12 reads the SIMD sub-opcode as one byte
		sub, err := r.byte()
		if err != nil {
			return err
		}
		switch {
		case sub >= 0x80:
			return nil // wazero reads the following byte as its own instruction
		case sub <= 11, sub == 92, sub == 93:
			return r.u32s(2)
		case sub == 12, sub == 13:
			return r.skipN(16)
		case sub >= 21 && sub <= 34:
			return r.skipN(1)
		case sub >= 84 && sub <= 91:
			if err := r.u32s(2); err != nil {
				return err
			}
			return r.skipN(1)
		}
		return nil
	case op == 0xfe:
		sub, err := r.byte()
		if err != nil {
			return err
		}
		if sub == 3 {
			return r.skipN(1)
		}
		return r.u32s(2)
	}
	return r.fail(fmt.Sprintf("unknown opcode 0x%02x", op))
}

func (r *reader) skipN1(err error) error {
	if err != nil {
		return err
	}
	return r.skipN(1)
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
