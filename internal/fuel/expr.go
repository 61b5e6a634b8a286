package fuel

// opKind classifies an instruction for the pass.
type opKind uint8

const (
	opOther opKind = iota // costs 1
	opBlock               // block or try_table: opens a frame, free
	opIf                  // opens a frame, costs 1
	opLoop                // opens a frame and a cost level, free
	opElse                // free
	opEnd                 // closes a frame, free
	opNop                 // free
	opFunc                // call, return_call or ref.func: a function index follows the opcode; costs 1
)

// invalidSIMD lists the unassigned opcodes below 0x100 of the 0xfd prefix.
var invalidSIMD = [256]bool{
	0x9a: true, 0xa2: true, 0xa5: true, 0xa6: true, 0xaf: true, 0xb0: true,
	0xb2: true, 0xb3: true, 0xb4: true, 0xbb: true, 0xc2: true, 0xc5: true,
	0xc6: true, 0xcf: true, 0xd0: true, 0xd2: true, 0xd3: true, 0xd4: true,
	0xe2: true, 0xee: true,
}

// scanExpr reads one expression from r.off up to and including the end that
// closes it, calling visit (if not nil) for every instruction with its kind
// and the offsets just before it and just after its immediates. It refuses
// opcodes it does not know (ErrUnsupported), truncated immediates and
// nesting deeper than MaxNesting (ErrMalformed). It validates encodings, not
// types: the result is for a validator such as wazero's to check.
func scanExpr(r *reader, visit func(k opKind, start, end int)) error {
	depth := 0
	for {
		start := r.off
		op, err := r.byte()
		if err != nil {
			return err
		}
		k := opOther
		switch {
		case op == 0x00, op == 0x0f, op == 0x1a, op == 0x1b, op == 0x0a, op == 0xd1:
			// unreachable, return, drop, select, throw_ref, ref.is_null
		case op == 0x01:
			k = opNop
		case op == 0x02, op == 0x03, op == 0x04:
			if err := r.blocktype(); err != nil {
				return err
			}
			k = [...]opKind{opBlock, opLoop, opIf}[op-0x02]
		case op == 0x1f: // try_table
			if err := r.blocktype(); err != nil {
				return err
			}
			n, err := r.count(2)
			if err != nil {
				return err
			}
			for i := uint32(0); i < n; i++ {
				ck, err := r.byte()
				if err != nil {
					return err
				}
				switch ck {
				case 0, 1:
					err = r.u32s(2)
				case 2, 3:
					err = r.u32s(1)
				default:
					return r.fail("bad catch kind")
				}
				if err != nil {
					return err
				}
			}
			k = opBlock
		case op == 0x05:
			k = opElse
		case op == 0x0b:
			k = opEnd
		case op == 0x10, op == 0x12, op == 0xd2: // call, return_call, ref.func
			err = r.u32s(1)
			k = opFunc
		case op == 0x08, op == 0x0c, op == 0x0d, op >= 0x20 && op <= 0x26:
			// throw, br, br_if, local/global/table get/set/tee
			err = r.u32s(1)
		case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
			err = r.u32s(2)
		case op == 0x0e: // br_table
			n, e := r.count(1)
			if e != nil {
				return e
			}
			err = r.u32s(int(n) + 1)
		case op == 0x1c: // select t*: wazero takes exactly the byte 0x01, then one type byte
			if err = r.selectCount(); err == nil {
				err = r.valtype()
			}
		case op >= 0x28 && op <= 0x3e:
			err = r.memarg()
		case op == 0x3f, op == 0x40: // memory.size, memory.grow: memory 0, one byte
			err = r.zeroByte()
		case op == 0x41:
			_, err = r.sleb(32)
		case op == 0x42:
			_, err = r.sleb(64)
		case op == 0x43:
			_, err = r.bytes(4)
		case op == 0x44:
			_, err = r.bytes(8)
		case op >= 0x45 && op <= 0xc4:
			// numeric, including sign extension (0xc0–0xc4)
		case op == 0xd0: // ref.null heaptype
			err = r.heaptype()
		case op == 0xfc:
			err = r.prefixFC()
		case op == 0xfd:
			err = r.prefixFD()
		case op == 0xfe:
			err = r.prefixFE()
		default:
			r.off = start
			return r.errf(ErrUnsupported, "opcode 0x%02x", op)
		}
		if err != nil {
			return err
		}
		switch k {
		case opBlock, opIf, opLoop:
			depth++
			if depth > MaxNesting {
				return r.fail("blocks nested too deeply")
			}
		case opEnd:
			depth--
		}
		if visit != nil {
			visit(k, start, r.off)
		}
		if depth < 0 {
			return nil
		}
	}
}

// u32s skips n u32 immediates.
func (r *reader) u32s(n int) error {
	for i := 0; i < n; i++ {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// memarg reads a memory argument as wazero v1.12 does (readMemArg in its
// validator and wazevo frontend): an alignment u32 below 32 and an offset
// u32. wazero has no multi-memory: the 0x40 bit the spec uses to announce a
// memory index makes the alignment 32 or more, which wazero refuses, and so
// does the pass.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align >= 32 {
		return r.errf(ErrUnsupported, "memory alignment %d (multi-memory)", align)
	}
	_, err = r.u32()
	return err
}

// zeroByte reads a reserved memory index: wazero requires the single byte
// 0x00 (and the wazevo frontend skips exactly one byte).
func (r *reader) zeroByte() error {
	c, err := r.byte()
	if err == nil && c != 0 {
		r.off--
		return r.errf(ErrUnsupported, "reserved memory index byte 0x%02x", c)
	}
	return err
}

// subOpcode reads the opcode after a prefix byte as ONE byte, as wazero
// v1.12 reads the 0xfd and 0xfe prefixes, and refuses a byte with the
// continuation bit except as allowed by the caller: where the spec's LEB128
// reading and wazero's single byte could differ, the module is refused.
func (r *reader) subOpcode() (byte, error) { return r.byte() }

// prefixFC reads a 0xfc instruction. wazero reads its sub-opcode as a
// LEB128 u32 (and so does the spec); the pass accepts only the minimal,
// one-byte encoding, so no padded encoding can be read two ways.
func (r *reader) prefixFC() error {
	sub, err := r.subOpcode()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // saturating truncations
		return nil
	case sub == 8: // memory.init: data index, memory 0
		if _, err := r.u32(); err != nil {
			return err
		}
		return r.zeroByte()
	case sub == 10: // memory.copy: memory 0, memory 0
		if err := r.zeroByte(); err != nil {
			return err
		}
		return r.zeroByte()
	case sub == 11: // memory.fill: memory 0
		return r.zeroByte()
	case sub == 12, sub == 14: // table.init, table.copy
		return r.u32s(2)
	case sub <= 17: // data.drop, elem.drop, table.grow/size/fill
		return r.u32s(1)
	}
	r.off--
	return r.errf(ErrUnsupported, "opcode 0xfc 0x%02x", sub)
}

// prefixFD reads a 0xfd (SIMD) instruction. wazero v1.12 reads the
// sub-opcode as ONE byte (its validator and the wazevo frontend), the spec
// as a LEB128 u32. They agree on sub-opcodes below 0x80. For 0x80–0xff the
// spec's two-byte encoding is the byte followed by 0x01, which wazero reads
// as the opcode and then a nop: the pass takes both bytes as the
// instruction (the nop is free and opens nothing) and refuses any other byte
// after it, which the two would read differently (F12: fd 8c 00 is
// i16x8.shr_s; unreachable to wazero and v128.const to the spec).
func (r *reader) prefixFD() error {
	sub, err := r.subOpcode()
	if err != nil {
		return err
	}
	switch {
	case sub >= 0x80:
		if invalidSIMD[sub] {
			break
		}
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c != 0x01 {
			r.off -= 2
			return r.errf(ErrUnsupported, "SIMD opcode 0xfd 0x%02x 0x%02x, which wazero and the spec read differently", sub, c)
		}
		return nil
	case sub <= 11, sub == 92, sub == 93: // loads, stores
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		_, err = r.bytes(16)
		return err
	case sub >= 21 && sub <= 34: // extract/replace lane
		_, err = r.byte()
		return err
	case sub >= 84 && sub <= 91: // load/store lane
		if err := r.memarg(); err != nil {
			return err
		}
		_, err = r.byte()
		return err
	case !invalidSIMD[sub]:
		return nil
	}
	r.off--
	return r.errf(ErrUnsupported, "opcode 0xfd 0x%02x", sub)
}

// prefixFE reads a 0xfe (atomic) instruction. wazero reads the sub-opcode
// as one byte; every atomic opcode is below 0x80, where that is the spec's
// minimal LEB128, and anything else is refused.
func (r *reader) prefixFE() error {
	sub, err := r.subOpcode()
	if err != nil {
		return err
	}
	switch {
	case sub <= 2, sub >= 0x10 && sub <= 0x4e:
		return r.memarg()
	case sub == 3: // atomic.fence
		c, err := r.byte()
		if err == nil && c != 0 {
			return r.fail("bad atomic.fence immediate")
		}
		return err
	}
	r.off--
	return r.errf(ErrUnsupported, "opcode 0xfe 0x%02x", sub)
}

// selectCount reads select's type count, which wazero requires to be the single
// byte 0x01.
func (r *reader) selectCount() error {
	c, err := r.byte()
	if err == nil && c != 0x01 {
		r.off--
		return r.errf(ErrUnsupported, "select with %#x types", c)
	}
	return err
}

// valtype reads a value type the pass understands.
func (r *reader) valtype() error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	if simpleValtype(t) {
		return nil
	}
	r.off--
	return r.errf(ErrUnsupported, "value type 0x%02x", t)
}

// blocktype reads a block type: empty, a value type, or a type index.
func (r *reader) blocktype() error {
	if r.off < len(r.b) && (r.b[r.off] == 0x40 || simpleValtype(r.b[r.off])) {
		r.off++
		return nil
	}
	start := r.off
	idx, err := r.sleb(33)
	if err != nil {
		return err
	}
	if idx < 0 {
		r.off = start
		return r.errf(ErrUnsupported, "block type 0x%02x", r.b[start])
	}
	return nil
}

// heaptype reads the heap type of ref.null: func, extern or exn.
func (r *reader) heaptype() error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	if t != 0x70 && t != 0x6f && t != 0x69 {
		r.off--
		return r.errf(ErrUnsupported, "heap type 0x%02x", t)
	}
	return nil
}

func simpleValtype(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
		return true
	}
	return false
}
