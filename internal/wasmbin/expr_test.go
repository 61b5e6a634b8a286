package wasmbin

import (
	"errors"
	"testing"
)

// TestScanExprStrictness: the encodings wazero and the spec read
// differently are read as wazero reads them under AsWazero and refused
// (ErrUnsupported) under Refuse; the encodings both read alike are read
// the same way in both.
func TestScanExprStrictness(t *testing.T) {
	for _, c := range []struct {
		name   string
		expr   []byte
		ops    int  // instructions AsWazero visits, the final end included
		refuse bool // whether Refuse refuses it
	}{
		{"F12 fd 8c 00", []byte{0xfd, 0x8c, 0x00, 0x0b}, 3, true},   // i16x8.shr_s, unreachable, end
		{"spec fd 8c 01", []byte{0xfd, 0x8c, 0x01, 0x0b}, 3, false}, // wazero: i16x8.shr_s, nop
		{"padded fc 80 00", []byte{0xfc, 0x80, 0x00, 0x0b}, 2, true},
		{"minimal fc 00", []byte{0xfc, 0x00, 0x0b}, 2, false},
		{"fd 0c v128.const", append(append([]byte{0xfd, 0x0c}, make([]byte, 16)...), 0x0b), 2, false},
	} {
		n := 0
		if err := ScanExpr(NewReader(c.expr, 0), AsWazero, func(Op, int, int) { n++ }); err != nil || n != c.ops {
			t.Errorf("%s: AsWazero: %d instructions, %v; want %d, nil", c.name, n, err, c.ops)
		}
		err := ScanExpr(NewReader(c.expr, 0), Refuse, nil)
		if c.refuse != (err != nil) || (c.refuse && !errors.Is(err, ErrUnsupported)) {
			t.Errorf("%s: Refuse: %v, want refused=%v with ErrUnsupported", c.name, err, c.refuse)
		}
	}
	// Both refuse an unassigned SIMD opcode and an unknown opcode.
	for _, expr := range [][]byte{{0xfd, 0x9a, 0x01, 0x0b}, {0xff, 0x0b}} {
		for _, s := range []Strictness{AsWazero, Refuse} {
			if err := ScanExpr(NewReader(expr, 0), s, nil); !errors.Is(err, ErrUnsupported) {
				t.Errorf("% x under %d: %v, want ErrUnsupported", expr, s, err)
			}
		}
	}
}
