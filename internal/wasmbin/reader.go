package wasmbin

import (
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error for bytes that are not a
// well-formed Wasm binary (the errors of Parse, LimitTables, Reader and
// ScanExpr among them).
var ErrMalformed = errors.New("malformed wasm binary")

// ErrUnsupported is wrapped by errors for a well-formed binary that uses
// something the reader does not understand (an unknown opcode, value type
// or block type), or, under Refuse, an encoding wazero and the spec read
// differently.
var ErrUnsupported = errors.New("unsupported wasm feature")

// Reader reads a Wasm binary from an offset: bytes, LEB128 integers, names,
// vector counts, value types and limits, with the encoding rules of the spec
// (and of wazero v1.12's decoder). Its errors wrap ErrMalformed (or
// ErrUnsupported) and name the offset, counted from the start of the slice
// it reads, so a reader over b[:end] starting at off reports offsets in b.
// It never reads past its slice and never panics.
type Reader struct {
	b   []byte
	off int
}

// NewReader returns a reader of b positioned at off.
func NewReader(b []byte, off int) *Reader { return &Reader{b: b, off: off} }

// Offset is the offset of the next byte to read.
func (r *Reader) Offset() int { return r.off }

// SetOffset moves the reader to off.
func (r *Reader) SetOffset(off int) { r.off = off }

// Since returns the bytes read from start up to the current offset.
func (r *Reader) Since(start int) []byte { return r.b[start:r.off] }

// EOF reports whether every byte has been read.
func (r *Reader) EOF() bool { return r.off >= len(r.b) }

// Len is the number of bytes left.
func (r *Reader) Len() int { return len(r.b) - r.off }

// Errorf returns an error wrapping base with the message and the current
// offset.
func (r *Reader) Errorf(base error, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", base, fmt.Sprintf(format, args...), r.off)
}

// Fail returns an ErrMalformed error saying what is wrong at the current
// offset.
func (r *Reader) Fail(what string) error { return r.Errorf(ErrMalformed, "%s", what) }

// Byte reads one byte.
func (r *Reader) Byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.Fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// Bytes reads n bytes; the result aliases the reader's slice.
func (r *Reader) Bytes(n uint64) ([]byte, error) {
	if n > uint64(r.Len()) {
		return nil, r.Fail("length past end")
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// Rest returns the bytes left, without reading them.
func (r *Reader) Rest() []byte { return r.b[r.off:] }

// Sub reads n bytes and returns a reader of just those, at their start. Its
// offsets are counted as r counts them.
func (r *Reader) Sub(n uint64) (*Reader, error) {
	start := r.off
	if _, err := r.Bytes(n); err != nil {
		return nil, err
	}
	return &Reader{b: r.b[:r.off], off: start}, nil
}

// ULEB reads an unsigned LEB128 of at most bits bits: at most ⌈bits/7⌉
// bytes, and no set bit past the width in the last.
func (r *Reader) ULEB(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if shift+7 >= bits { // the last byte the width allows
			if c&0x80 != 0 {
				return 0, r.Fail("LEB128 too long")
			}
			if uint64(c)>>(bits-shift) != 0 {
				return 0, r.Fail("LEB128 overflows")
			}
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

// U32 reads an unsigned LEB128 u32.
func (r *Reader) U32() (uint32, error) {
	v, err := r.ULEB(32)
	return uint32(v), err
}

// SLEB reads a signed LEB128 of at most bits bits: at most ⌈bits/7⌉ bytes,
// and the bits of the last past the width all copies of the sign bit.
func (r *Reader) SLEB(bits uint) (int64, error) {
	var v int64
	for shift := uint(0); ; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if shift+7 >= bits {
			if c&0x80 != 0 {
				return 0, r.Fail("LEB128 too long")
			}
			k := bits - shift // payload bits in this byte, sign included
			if top := (c & 0x7f) >> (k - 1); top != 0 && top != 0x7f>>(k-1) {
				return 0, r.Fail("LEB128 overflows")
			}
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v, nil
		}
	}
}

// Count reads a vector length and refuses one larger than the bytes left
// can hold (every entry takes at least minSize bytes), so a count cannot
// drive an allocation past the input's size.
func (r *Reader) Count(minSize int) (uint32, error) {
	n, err := r.U32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(r.Len()) {
		return 0, r.Fail(fmt.Sprintf("count %d larger than the bytes left", n))
	}
	return n, nil
}

// Name reads a length-prefixed name (its bytes are not checked as UTF-8).
func (r *Reader) Name() (string, error) {
	n, err := r.U32()
	if err != nil {
		return "", err
	}
	b, err := r.Bytes(uint64(n))
	return string(b), err
}

// Valtype reads a one-byte value type: a number type, v128, funcref,
// externref or exnref. Others (the typed function references, which
// sandboxd does not enable) are ErrUnsupported.
func (r *Reader) Valtype() error {
	t, err := r.Byte()
	if err != nil {
		return err
	}
	if IsValtype(t) {
		return nil
	}
	r.off--
	return r.Errorf(ErrUnsupported, "value type 0x%02x", t)
}

// IsValtype reports whether t is a one-byte value type Valtype accepts.
func IsValtype(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
		return true
	}
	return false
}

// Limits reads memory or table limits: a flag (bit 0: a maximum follows;
// bit 2: 64-bit limits; flags above 7 are malformed), the minimum and the
// maximum.
func (r *Reader) Limits() (Limits, error) {
	flag, err := r.Byte()
	if err != nil {
		return Limits{}, err
	}
	if flag > 7 {
		return Limits{}, r.Fail("bad limits flag")
	}
	bits := uint(32)
	if flag&4 != 0 { // 64-bit memory
		bits = 64
	}
	var l Limits
	if l.Min, err = r.ULEB(bits); err != nil {
		return l, err
	}
	if flag&1 != 0 {
		l.HasMax = true
		if l.Max, err = r.ULEB(bits); err != nil {
			return l, err
		}
	}
	return l, nil
}

// AppendULEB appends v as an unsigned LEB128 of the fewest bytes.
func AppendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// AppendSLEB appends v as a signed LEB128 of the fewest bytes.
func AppendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
