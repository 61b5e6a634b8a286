package wasmbin

// Op classifies an instruction for the callers of ScanExpr.
type Op uint8

// Instruction classes.
const (
	OpOther Op = iota // every instruction not listed below
	OpBlock           // block or try_table: opens a frame
	OpIf              // if: opens a frame
	OpLoop            // loop: opens a frame
	OpElse            // else
	OpEnd             // end: closes a frame, or the expression
	OpNop             // nop
	OpFunc            // call, return_call or ref.func: a function index follows the opcode
)

// Strictness says what ScanExpr does with the encodings that wazero v1.12
// and the spec read differently. wazero reads the sub-opcode after the 0xfd
// (SIMD) prefix as one byte, the spec as a LEB128 u32; they agree below
// 0x80. For 0x80–0xff the spec's two-byte encoding is the byte followed by
// 0x01, which wazero reads as the opcode and then a nop; any other byte
// after it the two read as different instructions (F12: fd 8c 00 is
// i16x8.shr_s then unreachable to wazero, v128.const to the spec). wazero
// reads the sub-opcode after 0xfc as a LEB128 u32, as the spec does, so a
// padded encoding is one instruction to both but can hide the instruction
// from a reader that takes one byte.
type Strictness uint8

const (
	// AsWazero reads every encoding as wazero v1.12 does: after 0xfd and a
	// sub-opcode of 0x80 or more the next byte is an instruction of its
	// own, and 0xfc sub-opcodes may be padded. For a caller that must see
	// what wazero's compiler will see (the compile budget).
	AsWazero Strictness = iota
	// Refuse refuses, with ErrUnsupported, every encoding that wazero and
	// the spec could read differently: after 0xfd and a sub-opcode of 0x80
	// or more only the byte 0x01 is accepted (and taken as part of the
	// instruction, so the nop wazero sees is no instruction of its own),
	// and a 0xfc sub-opcode must be one byte. For a caller that rewrites
	// what it reads (the fuel pass): every instruction it accepts is the
	// same instruction to every reader.
	Refuse
)

// MaxNesting is the deepest block nesting ScanExpr accepts in one
// expression.
const MaxNesting = 1 << 14

// invalidSIMD lists the unassigned opcodes below 0x100 of the 0xfd prefix.
var invalidSIMD = [256]bool{
	0x9a: true, 0xa2: true, 0xa5: true, 0xa6: true, 0xaf: true, 0xb0: true,
	0xb2: true, 0xb3: true, 0xb4: true, 0xbb: true, 0xc2: true, 0xc5: true,
	0xc6: true, 0xcf: true, 0xd0: true, 0xd2: true, 0xd3: true, 0xd4: true,
	0xe2: true, 0xee: true,
}

// ScanExpr reads one expression from r's offset up to and including the end
// that closes it, calling visit (if not nil) for every instruction with its
// class and the offsets just before it and just after its immediates. It
// reads immediates as wazero v1.12 does, with s deciding the encodings
// wazero and the spec read differently, and refuses opcodes it does not
// know (ErrUnsupported), so nothing can hide an instruction from it that the
// compiler would see; it refuses truncated immediates and nesting deeper
// than MaxNesting (ErrMalformed). It validates encodings, not types: the
// result is for a validator such as wazero's to check. It takes time linear
// in the expression's size.
func ScanExpr(r *Reader, s Strictness, visit func(op Op, start, end int)) error {
	depth := 0
	for {
		start := r.off
		op, err := r.Byte()
		if err != nil {
			return err
		}
		k := OpOther
		switch {
		case op == 0x00, op == 0x0f, op == 0x1a, op == 0x1b, op == 0x0a, op == 0xd1:
			// unreachable, return, drop, select, throw_ref, ref.is_null
		case op == 0x01:
			k = OpNop
		case op == 0x02, op == 0x03, op == 0x04:
			if err := r.blocktype(); err != nil {
				return err
			}
			k = [...]Op{OpBlock, OpLoop, OpIf}[op-0x02]
		case op == 0x1f: // try_table
			if err := r.blocktype(); err != nil {
				return err
			}
			if err := r.catches(); err != nil {
				return err
			}
			k = OpBlock
		case op == 0x05:
			k = OpElse
		case op == 0x0b:
			k = OpEnd
		case op == 0x10, op == 0x12, op == 0xd2: // call, return_call, ref.func
			err = r.u32s(1)
			k = OpFunc
		case op == 0x08, op == 0x0c, op == 0x0d, op >= 0x20 && op <= 0x26:
			// throw, br, br_if, local/global/table get/set/tee
			err = r.u32s(1)
		case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
			err = r.u32s(2)
		case op == 0x0e: // br_table
			n, e := r.Count(1)
			if e != nil {
				return e
			}
			err = r.u32s(int(n) + 1)
		case op == 0x1c: // select t*: wazero takes exactly the byte 0x01, then one type byte
			if err = r.selectCount(); err == nil {
				err = r.Valtype()
			}
		case op >= 0x28 && op <= 0x3e:
			err = r.memarg()
		case op == 0x3f, op == 0x40: // memory.size, memory.grow: memory 0, one byte
			err = r.zeroByte()
		case op == 0x41:
			_, err = r.SLEB(32)
		case op == 0x42:
			_, err = r.SLEB(64)
		case op == 0x43:
			_, err = r.Bytes(4)
		case op == 0x44:
			_, err = r.Bytes(8)
		case op >= 0x45 && op <= 0xc4:
			// numeric, including sign extension (0xc0–0xc4)
		case op == 0xd0: // ref.null heaptype
			err = r.heaptype()
		case op == 0xfc:
			err = r.prefixFC(s)
		case op == 0xfd:
			err = r.prefixFD(s)
		case op == 0xfe:
			err = r.prefixFE()
		default:
			r.off = start
			return r.Errorf(ErrUnsupported, "opcode 0x%02x", op)
		}
		if err != nil {
			return err
		}
		switch k {
		case OpBlock, OpIf, OpLoop:
			depth++
			if depth > MaxNesting {
				return r.Fail("blocks nested too deeply")
			}
		case OpEnd:
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
func (r *Reader) u32s(n int) error {
	for i := 0; i < n; i++ {
		if _, err := r.U32(); err != nil {
			return err
		}
	}
	return nil
}

// catches skips try_table's catch clauses.
func (r *Reader) catches() error {
	n, err := r.Count(2)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		ck, err := r.Byte()
		if err != nil {
			return err
		}
		switch ck {
		case 0, 1:
			err = r.u32s(2)
		case 2, 3:
			err = r.u32s(1)
		default:
			return r.Fail("bad catch kind")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// memarg reads a memory argument as wazero v1.12 does (readMemArg in its
// validator and wazevo frontend): an alignment u32 below 32 and an offset
// u32. wazero has no multi-memory: the 0x40 bit the spec uses to announce a
// memory index makes the alignment 32 or more, which wazero refuses, and so
// does ScanExpr.
func (r *Reader) memarg() error {
	align, err := r.U32()
	if err != nil {
		return err
	}
	if align >= 32 {
		return r.Errorf(ErrUnsupported, "memory alignment %d (multi-memory)", align)
	}
	_, err = r.U32()
	return err
}

// zeroByte reads a reserved memory index: wazero requires the single byte
// 0x00 (and the wazevo frontend skips exactly one byte).
func (r *Reader) zeroByte() error {
	c, err := r.Byte()
	if err == nil && c != 0 {
		r.off--
		return r.Errorf(ErrUnsupported, "reserved memory index byte 0x%02x", c)
	}
	return err
}

// prefixFC reads a 0xfc instruction. wazero reads its sub-opcode as a
// LEB128 u32, and so does the spec; under Refuse only the minimal, one-byte
// encoding is accepted, so no padded encoding can be read two ways.
func (r *Reader) prefixFC(s Strictness) error {
	at := r.off
	var sub uint64
	if s == AsWazero {
		v, err := r.ULEB(32)
		if err != nil {
			return err
		}
		sub = v
	} else {
		c, err := r.Byte()
		if err != nil {
			return err
		}
		sub = uint64(c)
	}
	switch {
	case sub <= 7: // saturating truncations
		return nil
	case sub == 8: // memory.init: data index, memory 0
		if _, err := r.U32(); err != nil {
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
	r.off = at
	return r.Errorf(ErrUnsupported, "opcode 0xfc 0x%02x", sub)
}

// prefixFD reads a 0xfd (SIMD) instruction; see Strictness for its
// sub-opcodes of 0x80 and more.
func (r *Reader) prefixFD(s Strictness) error {
	sub, err := r.Byte() // one byte, as wazero reads it
	if err != nil {
		return err
	}
	switch {
	case sub >= 0x80:
		if invalidSIMD[sub] {
			break
		}
		if s == AsWazero {
			return nil // wazero reads the following byte as its own instruction
		}
		c, err := r.Byte()
		if err != nil {
			return err
		}
		if c != 0x01 {
			r.off -= 2
			return r.Errorf(ErrUnsupported, "SIMD opcode 0xfd 0x%02x 0x%02x, which wazero and the spec read differently", sub, c)
		}
		return nil
	case sub <= 11, sub == 92, sub == 93: // loads, stores
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		_, err = r.Bytes(16)
		return err
	case sub >= 21 && sub <= 34: // extract/replace lane
		_, err = r.Byte()
		return err
	case sub >= 84 && sub <= 91: // load/store lane
		if err := r.memarg(); err != nil {
			return err
		}
		_, err = r.Byte()
		return err
	case !invalidSIMD[sub]:
		return nil
	}
	r.off--
	return r.Errorf(ErrUnsupported, "opcode 0xfd 0x%02x", sub)
}

// prefixFE reads a 0xfe (atomic) instruction. wazero reads the sub-opcode
// as one byte; every atomic opcode is below 0x80, where that is the spec's
// minimal LEB128, and anything else is refused.
func (r *Reader) prefixFE() error {
	sub, err := r.Byte()
	if err != nil {
		return err
	}
	switch {
	case sub <= 2, sub >= 0x10 && sub <= 0x4e:
		return r.memarg()
	case sub == 3: // atomic.fence
		c, err := r.Byte()
		if err == nil && c != 0 {
			return r.Fail("bad atomic.fence immediate")
		}
		return err
	}
	r.off--
	return r.Errorf(ErrUnsupported, "opcode 0xfe 0x%02x", sub)
}

// selectCount reads select's type count, which wazero requires to be the
// single byte 0x01.
func (r *Reader) selectCount() error {
	c, err := r.Byte()
	if err == nil && c != 0x01 {
		r.off--
		return r.Errorf(ErrUnsupported, "select with %#x types", c)
	}
	return err
}

// blocktype reads a block type: empty, a value type, or a type index.
func (r *Reader) blocktype() error {
	if r.off < len(r.b) && (r.b[r.off] == 0x40 || IsValtype(r.b[r.off])) {
		r.off++
		return nil
	}
	start := r.off
	idx, err := r.SLEB(33)
	if err != nil {
		return err
	}
	if idx < 0 {
		r.off = start
		return r.Errorf(ErrUnsupported, "block type 0x%02x", r.b[start])
	}
	return nil
}

// heaptype reads the heap type of ref.null: func, extern or exn.
func (r *Reader) heaptype() error {
	t, err := r.Byte()
	if err != nil {
		return err
	}
	if t != 0x70 && t != 0x6f && t != 0x69 {
		r.off--
		return r.Errorf(ErrUnsupported, "heap type 0x%02x", t)
	}
	return nil
}
