package fuel

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// TestBulkSemantics runs testdata/wat/bulk.wasm plain and instrumented: the
// helpers that replace the bulk and growth instructions give the same
// results, the same traps and the same final memory (an out-of-bounds op
// writes nothing), and copies keep memmove order across chunks.
func TestBulkSemantics(t *testing.T) {
	bin := readFile(t, "testdata/wat/bulk.wasm")
	if differential(t, bin) {
		t.Fatal("ran out of fuel")
	}
	out := runModule(t, mustInstrumentBytes(t, bin), runOpts{metered: true, budget: diffBudget})
	s := out.String()
	for _, want := range []string{
		"b_fill_oob: error wasm error: out of bounds memory access",
		"e_copy_oob: error wasm error: out of bounds memory access",
		"e_copy_oob_wrap: error wasm error: out of bounds memory access",
		"g_init_oob: error wasm error: out of bounds memory access",
		"h_init_dropped: [1]",
		"i_init_dropped_trap: error wasm error: out of bounds memory access",
		"j_grow: [8009]", // 8*1000 + 10 + -1
		"k_table_fill: [50022]",
		"l_table_fill_oob: error wasm error: invalid table access",
		"m_table_copy: [33]",
		"n_table_init: [23]",
		"o_table_init_oob: error wasm error: invalid table access",
		"p_table_grow: [1000109]",
		"q_elem_drop_init: [5]",
		"r_table_copy_oob: error wasm error: invalid table access",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("outcome lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("outcome:\n%s", s)
	}
	_, st := mustInstrument(t, bin)
	if st.TableElems != 10+30000 || !st.TableImports || st.Helpers == 0 || st.MemoryGrows != 1 || st.TableGrows != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// refusingTables refuses every growth and records what was asked.
type refusingTables struct{ asked, released int64 }

func (a *refusingTables) ReserveTable(n int64) bool { a.asked += n; return false }
func (a *refusingTables) ReleaseTable(n int64)      { a.released += n }

// grantingTables grants every growth and records it.
type grantingTables struct{ asked, released int64 }

func (a *grantingTables) ReserveTable(n int64) bool { a.asked += n; return true }
func (a *grantingTables) ReleaseTable(n int64)      { a.released += n }

// TestTableGrowAsksTheHost: table.grow returns -1 without growing when the
// call's TableAccount refuses, or when there is none; growth the account
// grants and wazero refuses (past the maximum) is never reserved.
func TestTableGrowAsksTheHost(t *testing.T) {
	mod, meter := instance(t, readFile(t, "testdata/wat/bulk.wasm"))
	grow := mod.ExportedFunction("p_table_grow")
	for _, ctx := range []context.Context{context.Background(), WithTableAccount(context.Background(), &refusingTables{})} {
		meter.Set(1 << 30)
		res, err := grow.Call(meter.Context(ctx))
		if err != nil {
			t.Fatal(err)
		}
		// -1*100000 + 10 (grow 0 returns the size) + -1
		if int32(res[0]) != -100000+10-1 {
			t.Errorf("p_table_grow = %d", int32(res[0]))
		}
	}
	a := &refusingTables{}
	meter.Set(1 << 30)
	if _, err := grow.Call(meter.Context(WithTableAccount(context.Background(), a))); err != nil {
		t.Fatal(err)
	}
	if a.asked != 100+19900 || a.released != 0 {
		t.Errorf("refused: asked %d released %d, want 20000 and 0", a.asked, a.released)
	}
	g := &grantingTables{}
	meter.Set(1 << 30)
	if _, err := grow.Call(meter.Context(WithTableAccount(context.Background(), g))); err != nil {
		t.Fatal(err)
	}
	if g.asked != 100 || g.released != 0 {
		t.Errorf("granted: asked %d released %d, want 100 and 0 (110+19900 is past the maximum: not asked)", g.asked, g.released)
	}
}

// bigBulk is a reactor whose "spin" repeats a bulk instruction of n bytes
// (fill, copy or init) forever, in a memory of pages pages.
func bigBulk(op string, n, pages int) []byte {
	var ins []byte
	i32 := func(v int) []byte { return wasmbin.AppendSLEB([]byte{0x41}, int64(int32(uint32(v)))) }
	switch op {
	case "fill":
		ins = wcat(i32(0), i32(1), i32(n), []byte{0xfc, 0x0b, 0x00})
	case "copy":
		ins = wcat(i32(0), i32(1), i32(n), []byte{0xfc, 0x0a, 0x00, 0x00})
	}
	code := wcat([]byte{0x00, 0x03, 0x40}, ins, []byte{0x0c, 0x00, 0x0b, 0x0b})
	return wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x00})),
		wsection(secFunction, wvec([]byte{0x00})),
		wsection(secMemory, wvec(wasmbin.AppendULEB([]byte{0x00}, uint64(pages)))),
		wsection(secExport, wvec(wcat(wname("spin"), []byte{KindFunc, 0}))),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(code))), code...))))
}

// TestF01BulkInterruptLatency: a guest repeating memory.fill / memory.copy
// of 256 MiB (F01 used 8 and 60 MiB) stops within milliseconds of an
// Interrupt, and a small budget stops it after about that much work: the
// helpers charge per chunk and check between chunks.
func TestF01BulkInterruptLatency(t *testing.T) {
	const size = 256 << 20
	for _, op := range []string{"fill", "copy"} {
		t.Run(op, func(t *testing.T) {
			mod, meter := instance(t, bigBulk(op, size, size>>16+1))
			spin := mod.ExportedFunction("spin")
			// Budget: a few Slices.
			meter.Set(4 * Slice)
			start := time.Now()
			if _, err := spin.Call(meter.Context(context.Background())); err == nil || !meter.Exhausted() {
				t.Fatalf("spin returned %v, exhausted %v", err, meter.Exhausted())
			}
			t.Logf("%s: 4 Slices of fuel ran %v", op, time.Since(start))
			if testing.Short() {
				t.Skip("-short: the interrupt-latency measurement (max of 20 within 10 ms, no allowance for a busy machine) runs in the full run")
			}
			// Interrupts at random points, with an unlimited budget.
			var lat []time.Duration
			for i := 0; i < 20; i++ {
				meter.Set(Unlimited)
				done := make(chan time.Time, 1)
				go func() {
					_, _ = spin.Call(meter.Context(context.Background()))
					done <- time.Now()
				}()
				time.Sleep(time.Duration(5+i%7) * time.Millisecond)
				at := time.Now()
				meter.Interrupt()
				select {
				case end := <-done:
					lat = append(lat, end.Sub(at))
				case <-time.After(10 * time.Second):
					t.Fatal("the guest did not stop within 10 s of Interrupt")
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			p99 := lat[len(lat)-1]
			t.Logf("%s of %d MiB in a loop: interrupt latency median %v, max %v over %d runs", op, size>>20, lat[len(lat)/2], p99, len(lat))
			if bound := latencyBound(); p99 > bound {
				t.Errorf("interrupt latency %v > %v", p99, bound)
			}
		})
	}
}

// latencyBound is the interrupt latency the tests accept: 10 ms, more under
// the race detector.
func latencyBound() time.Duration {
	if raceEnabled {
		return 100 * time.Millisecond
	}
	return 10 * time.Millisecond
}
