package fuel

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// sliceLoop is a reactor whose "spin" runs body (stack-neutral, using i64
// local 0, f64 local 1 and i32 local 2) in an endless loop.
func sliceLoop(body []byte) []byte {
	code := wcat([]byte{0x03, 0x01, 0x7e, 0x01, 0x7c, 0x01, 0x7f}, // locals: i64, f64, i32
		[]byte{0x42, 0x07, 0x21, 0x00, 0x44, 0, 0, 0, 0, 0, 0, 0x1c, 0x40, 0x21, 0x01}, // x = 7, y = 7.0
		[]byte{0x03, 0x40}, body, []byte{0x0c, 0x00, 0x0b, 0x0b})
	return wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x00}, []byte{0x60, 0x00, 0x01, 0x7f})),
		wsection(secFunction, wvec([]byte{0x00}, []byte{0x01})),
		wsection(secTable, wvec([]byte{0x70, 0x00, 0x01})),
		wsection(secMemory, wvec([]byte{0x00, 0x01})),
		wsection(secExport, wvec(wcat(wname("spin"), []byte{KindFunc, 0}))),
		wsection(secElement, wvec([]byte{0x00, 0x41, 0x00, 0x0b, 0x01, 0x01})),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(code))), code...), []byte{0x04, 0x00, 0x41, 0x01, 0x0b})))
}

// sliceMixes are instruction mixes whose time per Slice of fuel the tests
// bound: the slowest instructions wazero runs, in dependent chains.
var sliceMixes = map[string][]byte{
	// x = x / 3 + 7 (unsigned division)
	"i64.div_u": {0x20, 0x00, 0x42, 0x03, 0x80, 0x20, 0x00, 0x42, 0x07, 0x7c, 0x21, 0x00},
	// x = x % 1000003 + 12345
	"i64.rem_s": {0x20, 0x00, 0x42, 0xc3, 0x84, 0x3d, 0x81, 0x42, 0xb9, 0xe0, 0x00, 0x7c, 0x21, 0x00},
	// y = sqrt(y) + 1.0
	"f64.sqrt": {0x20, 0x01, 0x9f, 0x44, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0xa0, 0x21, 0x01},
	// y = y / 1.0000001
	"f64.div": {0x20, 0x01, 0x44, 0x48, 0xaf, 0xbc, 0x9a, 0xf2, 0xd7, 0x7a, 0x3e, 0xa3, 0x21, 0x01},
	// z = call_indirect 0 () -> i32 (function 1)
	"call_indirect": {0x41, 0x00, 0x11, 0x01, 0x00, 0x21, 0x02},
	// memory.size; memory.grow 0 (a host call in wazero)
	"memory.grow 0": {0x41, 0x00, 0x40, 0x00, 0x21, 0x02},
}

// TestSliceTime measures how long one Slice of fuel takes for the slowest
// instruction mixes and bounds it: a Slice is what an interrupt, a deadline
// and a GC stop-the-world wait for.
func TestSliceTime(t *testing.T) {
	bound := 4 * time.Millisecond // per Slice; ~1 ms is the aim, the machine is shared
	if raceEnabled {
		bound = 40 * time.Millisecond
	}
	for name, body := range sliceMixes {
		t.Run(name, func(t *testing.T) {
			mod, meter := instance(t, sliceLoop(body))
			spin := mod.ExportedFunction("spin")
			best := time.Duration(1 << 62)
			for i := 0; i < 5; i++ {
				meter.Set(8 * Slice)
				start := time.Now()
				if _, err := spin.Call(context.Background()); err == nil || !meter.Exhausted() {
					t.Fatalf("spin: %v", err)
				}
				best = min(best, time.Since(start)/8)
			}
			t.Logf("%s: %v per Slice (best of 5)", name, best)
			if best > bound {
				t.Errorf("%s: a Slice takes %v > %v", name, best, bound)
			}
		})
	}
}
