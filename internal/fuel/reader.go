package fuel

import (
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error Decode returns for a binary it
// cannot read.
var ErrMalformed = errors.New("malformed wasm binary")

// ErrUnsupported is wrapped by errors for well-formed binaries that use
// something the pass does not understand (an unknown opcode or section).
var ErrUnsupported = errors.New("unsupported wasm feature")

// Bounds the decoder enforces so hostile input costs bounded time and memory.
const (
	// MaxNesting is the deepest block nesting accepted in one expression.
	MaxNesting = 1 << 14
	// maxLocals bounds the locals of one function (wazero allows fewer).
	maxLocals = 1 << 20
)

type reader struct {
	b   []byte
	off int
}

func (r *reader) errf(base error, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", base, fmt.Sprintf(format, args...), r.off)
}

func (r *reader) fail(what string) error { return r.errf(ErrMalformed, "%s", what) }

func (r *reader) eof() bool { return r.off >= len(r.b) }

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, r.fail("length past end")
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift+7 >= bits { // the last byte the width allows
			if c&0x80 != 0 {
				return 0, r.fail("LEB128 too long")
			}
			if uint64(c)>>(bits-shift) != 0 {
				return 0, r.fail("LEB128 overflows")
			}
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

// sleb reads a signed LEB128 of at most bits bits.
func (r *reader) sleb(bits uint) (int64, error) {
	var v int64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift+7 >= bits {
			if c&0x80 != 0 {
				return 0, r.fail("LEB128 too long")
			}
			k := bits - shift // payload bits in this byte, sign included
			if top := (c & 0x7f) >> (k - 1); top != 0 && top != 0x7f>>(k-1) {
				return 0, r.fail("LEB128 overflows")
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

// count reads a vector length and refuses one larger than the bytes left
// (every entry takes at least minSize bytes), so counts cannot drive
// allocations past the input size.
func (r *reader) count(minSize int) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(r.remaining()) {
		return 0, r.fail(fmt.Sprintf("count %d larger than the bytes left", n))
	}
	return n, nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(uint64(n))
	return string(b), err
}

func appendULEB(b []byte, v uint64) []byte {
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

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendULEB(b, uint64(len(s)))
	return append(b, s...)
}
