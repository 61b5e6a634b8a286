package fuel

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// versionedLoops counts the loops of an instrumented body that the pass
// versioned (a loop whose body begins with block, loop: the outer loop of
// appendLoopOpen) and the loops with the plain check after the header.
func versionedLoops(t *testing.T, expr []byte) (versioned, plain int) {
	t.Helper()
	err := wasmbin.ScanExpr(wasmbin.NewReader(expr, 0), wasmbin.Refuse, func(k wasmbin.Op, start, end int) {
		if k != wasmbin.OpLoop {
			return
		}
		switch {
		case end+4 <= len(expr) && expr[end] == 0x02 && expr[end+1] == 0x40 && expr[end+2] == 0x03:
			versioned++
		case expr[end] == 0x20 && end+1 < len(expr):
			// the check: local.get $d; i64.const C; i64.sub; local.tee $d;
			// i64.const 0; i64.lt_s, then br_if 1 (versioned) or if
			r := wasmbin.NewReader(expr, end+1)
			if _, err := r.U32(); err != nil || r.Offset() >= len(expr) || expr[r.Offset()] != 0x42 {
				return
			}
			r.SetOffset(r.Offset() + 1)
			if _, err := r.SLEB(64); err != nil || r.Offset()+2 > len(expr) || expr[r.Offset()] != 0x7d || expr[r.Offset()+1] != 0x22 {
				return
			}
			r.SetOffset(r.Offset() + 2)
			if _, err := r.U32(); err != nil || r.Offset()+5 > len(expr) {
				return
			}
			if tail := expr[r.Offset() : r.Offset()+5]; string(tail) == "\x42\x00\x53\x04\x40" {
				plain++
			}
		}
	})
	if err != nil {
		t.Fatalf("the output does not scan: %v", err)
	}
	return versioned, plain
}

// TestLoopVersioningShapes: the loops of testdata/wat/loops.wasm and
// loops_spin.wasm whose block type has no parameters are versioned, the
// loops with a parameter keep the plain check, every loop still has its
// check (checkAgreementStatic) and the output compiles; with plainLoops no
// loop is versioned.
func TestLoopVersioningShapes(t *testing.T) {
	want := map[string][2]int{ // function: versioned, plain loops
		"nested": {2, 0}, "results": {2, 0}, "params": {1, 1},
		"spin_nested": {2, 0}, "spin_result": {2, 0}, "spin_params": {1, 1},
		"typed": {1, 0},
	}
	for _, file := range []string{"testdata/wat/loops.wasm", "testdata/wat/loops_spin.wasm"} {
		for _, plainLoops := range []bool{false, true} {
			bin := readFile(t, file)
			out, st, err := instrumentWith(bin, options{plainLoops: plainLoops})
			if err != nil {
				t.Fatal(err)
			}
			checkAgreementStatic(t, out, st)
			m, err := Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			names := exportNames(t, bin, KindFunc)
			code := m.section(secCode)
			for i, name := range names {
				v, p := versionedLoops(t, code.Funcs[i].Expr)
				w := want[name]
				if plainLoops {
					w = [2]int{0, w[0] + w[1]}
				}
				if v != w[0] || p != w[1] {
					t.Errorf("%s (plainLoops %v): %d versioned and %d plain loops, want %d and %d", name, plainLoops, v, p, w[0], w[1])
				}
			}
		}
	}
}

// TestLoopVersioningDifferential: loops.wasm, whose checksums change when a
// branch out of a versioned loop lands at the wrong label, returns the same
// plain and instrumented.
func TestLoopVersioningDifferential(t *testing.T) {
	bin := readFile(t, "testdata/wat/loops.wasm")
	if differential(t, bin) {
		t.Fatal("ran out of fuel")
	}
	out := runModule(t, mustInstrumentBytes(t, bin), runOpts{metered: true, budget: diffBudget})
	for _, want := range []string{"nested: [", "results: [", "params: [", "typed: ["} {
		if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "error") {
			t.Fatalf("outcome lacks %q or has an error:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

// TestRefillCarriesLocals: the refill paths of a function's entry and of
// a versioned loop carry the function's parameters and the locals the loop
// sets, of each number and vector type, across the call of refill on the
// operand stack (appendSave, appendRestore), and keep every bit: loops.wat's
// typed, whose locals pass through signalling NaNs with payloads and
// negative zero, returns what it returns plain after a refill at its entry
// and a dozen in its loop. On pass versions before 10 (nothing carried) the
// first half fails.
func TestRefillCarriesLocals(t *testing.T) {
	bin := readFile(t, "testdata/wat/loops.wasm")
	out, _ := mustInstrument(t, bin)
	m, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	typed := slices.Index(exportNames(t, bin, KindFunc), "typed")
	if typed < 0 {
		t.Fatal("loops.wasm exports no typed")
	}
	body := string(m.section(secCode).Funcs[typed].Expr)
	for what, seq := range map[string]string{
		// $seed i32: local.get; i64.extend_i32_u; $g f32: local.get;
		// i32.reinterpret_f32; i64.extend_i32_u
		"entry save":    "\x20\x00\xad\x20\x01\xbc\xad",
		"entry restore": "\xa7\xbe\x21\x01\xa7\x21\x00",
		// $i i32, $a i64 (i64.const 0; i64.or), $f f32, $d f64
		// (local.get; f64.copysign), $v v128 (local.get; v128.or)
		"loop save":    "\x20\x02\xad\x20\x03\x42\x00\x84\x20\x04\xbc\xad\x20\x05\x20\x05\xa6\x20\x06\x20\x06\xfd\x50",
		"loop restore": "\x21\x06\x21\x05\xa7\xbe\x21\x04\x21\x03\xa7\x21\x02",
	} {
		if n := strings.Count(body, seq); n != 1 {
			t.Errorf("%s (% x): %d in the output, want 1", what, seq, n)
		}
	}

	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	plain, err := r.Instantiate(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	const seed, g = 0x9e3779b9, 0xff800001 // g: a signalling NaN
	want, err := plain.ExportedFunction("typed").Call(ctx, seed, g)
	if err != nil {
		t.Fatal(err)
	}
	mod, meter := instance(t, bin)
	meter.Set(Unlimited)
	// One unit above the floor: the entry's check refills.
	meter.limit.Set(uint64(Unlimited - 1))
	got, err := mod.ExportedFunction("typed").Call(meter.Context(ctx), seed, g)
	if err != nil {
		t.Fatal(err)
	}
	if spent := Unlimited - meter.Remaining(); spent < 4*Slice {
		t.Fatalf("typed spent %d fuel: fewer than 4 refills on its way", spent)
	}
	if got[0] != want[0] {
		t.Fatalf("typed returned %#x metered, %#x plain", got[0], want[0])
	}
}

// TestLoopVersioningKeepsFuel: versioned loops spend exactly the fuel of
// the plain check and stop at the same point: the pass's fixtures, the
// repository's small guests and the binaryen corpus give the same results,
// the same fuel left after every call and run out in the same call, with
// versioned and with plain loops, under budgets that end inside a Slice,
// just past one (a refill that continues) and after several.
func TestLoopVersioningKeepsFuel(t *testing.T) {
	var files []string
	for _, pattern := range []string{"testdata/wat/*.wasm", "../../testdata/wasm/*.wasm", "testdata/ttf/*.wasm"} {
		fs, _ := filepath.Glob(pattern)
		files = append(files, fs...)
	}
	budgets := []int64{20_000, Slice + 54_321, 8*Slice + 7}
	step := 1
	if testing.Short() || raceEnabled {
		step = 4
	}
	compared := 0
	for i := 0; i < len(files); i += step {
		f := files[i]
		name := filepath.Base(f)
		if strings.HasPrefix(name, "hostile_") || name == "features.wasm" || longLoop(name) {
			continue // invalid on purpose; needs providers; runs for seconds
		}
		bin, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(bin) > 1<<20 || exportsReserved(t, bin) {
			continue
		}
		bin = limitTables(t, bin)
		versioned, _, err1 := instrumentWith(bin, options{})
		plain, _, err2 := instrumentWith(bin, options{plainLoops: true})
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: versioned %v, plain loops %v", name, err1, err2)
		}
		if err1 != nil {
			continue
		}
		for _, budget := range budgets {
			o := runOpts{metered: true, budget: budget, fuel: true, timeout: 10 * time.Second}
			got, want := runModule(t, versioned, o), runModule(t, plain, o)
			if got.Backstop || want.Backstop {
				t.Fatalf("%s, budget %d: stopped by the backstop (versioned %v, plain loops %v)", name, budget, got.Backstop, want.Backstop)
			}
			if g, w := got.String(), want.String(); g != w {
				t.Fatalf("%s, budget %d: versioned loops differ\n--- plain loops:\n%s\n--- versioned:\n%s", name, budget, w, g)
			}
		}
		compared++
	}
	t.Logf("%d modules compared under %d budgets", compared, len(budgets))
	if compared < 20 {
		t.Fatalf("only %d modules compared", compared)
	}
}

// TestVersionedLoopsStop: loops that never end, versioned and not, nested
// and with results, stop by fuel (under a backstop that would catch an
// unmetered loop), by the end of the call's context (the
// deadline sandboxd sets on every call) and by Interrupt after a garbage
// collection, which can finish only because the spinning guest leaves
// compiled code at its refills.
func TestVersionedLoopsStop(t *testing.T) {
	const bound = 2 * time.Second // generous: the machine may be loaded
	bin := readFile(t, "testdata/wat/loops_spin.wasm")
	// First under a backstop, so that a loop the pass left unmetered fails
	// the test instead of spinning in it for good.
	if n := backstopRun(t, mustInstrumentBytes(t, bin), 3*Slice+17, 10*time.Second); n != 3 {
		t.Fatalf("%d of 3 spinning calls ran out of fuel", n)
	}
	for _, fn := range []string{"spin_nested", "spin_result", "spin_params"} {
		t.Run(fn, func(t *testing.T) {
			mod, m := instance(t, bin)
			defer mod.Close(context.Background())
			f := mod.ExportedFunction(fn)

			m.Set(Unlimited)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			start := time.Now()
			_, err := f.Call(m.Context(ctx))
			cancel()
			if d := time.Since(start); err == nil || !m.Interrupted() || !m.Exhausted() || d > bound {
				t.Fatalf("deadline: err %v, interrupted %v, exhausted %v after %v", err, m.Interrupted(), m.Exhausted(), d)
			} else {
				t.Logf("deadline of 20ms: stopped after %v", d)
			}

			m.Set(Unlimited)
			fired := make(chan time.Time, 1)
			timer := time.AfterFunc(20*time.Millisecond, func() {
				runtime.GC()
				fired <- time.Now()
				m.Interrupt()
			})
			_, err = f.Call(m.Context(context.Background()))
			returned := time.Now()
			timer.Stop()
			if err == nil || !m.Interrupted() || !m.Exhausted() {
				t.Fatalf("interrupt: err %v, interrupted %v, exhausted %v", err, m.Interrupted(), m.Exhausted())
			}
			if d := returned.Sub(<-fired); d > bound {
				t.Fatalf("trapped %v after the interrupt", d)
			} else {
				t.Logf("GC then Interrupt: stopped %v after", d)
			}
		})
	}
}

// TestLeavesKeepFuel: a leaf (a function without loops and calls, pass
// version 11) charges what it charged with the entry check and the sync
// through the floor (options.plainLeaves: version 10's output), so every
// module of the corpus computes the same and has the same fuel left after
// each call, under budgets that end inside a Slice, just past one and after
// several. Where the budget runs out the two may stop at different points,
// and only there: a leaf does not check, so version 10 trapped at a leaf's
// entry where version 11 traps at the next check after it (or the call
// returns overdrawn when no check is left).
func TestLeavesKeepFuel(t *testing.T) {
	var files []string
	for _, pattern := range []string{"testdata/wat/*.wasm", "../../testdata/wasm/*.wasm", "testdata/ttf/*.wasm"} {
		fs, _ := filepath.Glob(pattern)
		files = append(files, fs...)
	}
	budgets := []int64{20_000, Slice + 54_321, 8*Slice + 7}
	step := 1
	if testing.Short() || raceEnabled {
		step = 4
	}
	compared, leaves, full := 0, 0, 0
	for i := 0; i < len(files); i += step {
		f := files[i]
		name := filepath.Base(f)
		if strings.HasPrefix(name, "hostile_") || name == "features.wasm" || longLoop(name) {
			continue // invalid on purpose; needs providers; runs for seconds
		}
		bin, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(bin) > 1<<20 || exportsReserved(t, bin) {
			continue
		}
		bin = limitTables(t, bin)
		now, st, err1 := instrumentWith(bin, options{})
		before, st10, err2 := instrumentWith(bin, options{plainLeaves: true})
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: version 11 %v, version 10 %v", name, err1, err2)
		}
		if err1 != nil {
			continue
		}
		if st10.Leaves != 0 || st.Checks+st.Leaves != st10.Checks {
			t.Fatalf("%s: %d checks and %d leaves, %d checks with plainLeaves (%d leaves)", name, st.Checks, st.Leaves, st10.Checks, st10.Leaves)
		}
		leaves += st.Leaves
		for _, budget := range budgets {
			o := runOpts{metered: true, budget: budget, fuel: true, timeout: 10 * time.Second}
			got, want := runModule(t, now, o), runModule(t, before, o)
			if got.Backstop || want.Backstop {
				t.Fatalf("%s, budget %d: stopped by the backstop (version 11 %v, version 10 %v)", name, budget, got.Backstop, want.Backstop)
			}
			if !got.Exhausted && !want.Exhausted && !overdrawn(got) {
				if g, w := got.String(), want.String(); g != w {
					t.Fatalf("%s, budget %d: leaves change the outcome\n--- version 10:\n%s\n--- version 11:\n%s", name, budget, w, g)
				}
				full++
				continue
			}
			// Up to the call that ran out (or overdrew), the same.
			for j := 0; j < len(got.Calls) && j < len(want.Calls); j++ {
				g, w := got.Calls[j], want.Calls[j]
				if g == w {
					continue
				}
				if !strings.HasSuffix(w, ": out of fuel") && !strings.HasSuffix(g, ": out of fuel") && !strings.Contains(g, " fuel -") {
					t.Fatalf("%s, budget %d: call %d differs before the budget ran out\n--- version 10: %s\n--- version 11: %s", name, budget, j, w, g)
				}
				break
			}
		}
		compared++
	}
	t.Logf("%d modules (%d leaves) compared under %d budgets, %d runs in full", compared, leaves, len(budgets), full)
	if compared < 20 || leaves < 20 || full < 20 {
		t.Fatalf("only %d modules, %d leaves, %d full runs compared", compared, leaves, full)
	}
}

// overdrawn reports whether a call of the outcome returned with its fuel
// below 0 (charged past its budget with no check left on its way out).
func overdrawn(o *outcome) bool {
	for _, c := range o.Calls {
		if strings.Contains(c, " fuel -") {
			return true
		}
	}
	return false
}
