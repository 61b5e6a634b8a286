package fuel

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustInstrument(t testing.TB, bin []byte) ([]byte, *Stats) {
	t.Helper()
	out, st, err := Instrument(bin)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	return out, st
}

// TestFeatures runs the module that uses every supported feature both ways
// and checks what the pass did to it.
func TestFeatures(t *testing.T) {
	bin := readFile(t, "testdata/wat/features.wasm")
	providers := map[string][]byte{"genv": readFile(t, "testdata/wat/genv.wasm")}
	if differentialWith(t, bin, providers) {
		t.Fatal("ran out of fuel")
	}
	_, st := mustInstrument(t, bin)
	// 1 imported global + 2 defined: the fuel globals are 3 and 4
	if st.FuelGlobal != 3 || st.LimitGlobal != 4 || st.Refill != 1 || !st.MovedStart || st.Functions != 16 || st.Checks != 7+3 || st.Leaves != 9 {
		t.Errorf("stats = %+v", st)
	}
	out := runModule(t, mustInstrumentBytes(t, bin), runOpts{metered: true, budget: diffBudget, providers: providers})
	for _, want := range []string{
		"bulk: [3]", "signext: [18446744073709518721]", "satconv: [2147483647]",
		"reftypes: [7]", "multivalue: [11]", "simd: [67305987]", "select: [7]", "fib: [6765]",
		"nested: [12087240] host env.log[12087240]", "imported: [42] host env.log[142]",
		"trap: error wasm error: integer divide by zero",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("outcome lacks %q:\n%s", want, out)
		}
	}
}

func mustInstrumentBytes(t testing.TB, bin []byte) []byte {
	out, _ := mustInstrument(t, bin)
	return out
}

// instance compiles and instantiates an instrumented module under a runtime
// without close-on-context-done: only the fuel counter can stop it.
func instance(t testing.TB, bin []byte) (api.Module, *Meter) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	t.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	mod, err := r.InstantiateWithConfig(ctx, mustInstrumentBytes(t, bin), wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMeter(mod)
	if err != nil {
		t.Fatal(err)
	}
	return mod, m
}

// TestFuelIsExact checks the cost model on count.wasm: a call with n >= 1
// costs exactly 1 + 10n, the same on every run, and a budget one short of
// that traps with the counter negative.
func TestFuelIsExact(t *testing.T) {
	mod, m := instance(t, readFile(t, "testdata/wat/count.wasm"))
	count := mod.ExportedFunction("count")
	ctx := context.Background()
	for _, n := range []uint64{1, 2, 10, 1000, 123457} {
		want := int64(1 + 10*n)
		for range 3 {
			m.Set(1 << 40)
			res, err := count.Call(ctx, n)
			if err != nil || res[0] != n {
				t.Fatalf("count(%d) = %v, %v", n, res, err)
			}
			if used := 1<<40 - m.Remaining(); used != want {
				t.Fatalf("count(%d) used %d fuel, want %d", n, used, want)
			}
		}
		m.Set(want)
		if _, err := count.Call(ctx, n); err != nil || m.Remaining() != 0 {
			t.Fatalf("count(%d) with exactly enough fuel: %v, %d left", n, err, m.Remaining())
		}
		m.Set(want - 1)
		_, err := count.Call(ctx, n)
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !m.Exhausted() {
			t.Fatalf("count(%d) one fuel short: err %v, remaining %d", n, err, m.Remaining())
		}
	}
	// A guest's own unreachable leaves the counter non-negative.
	mod2, m2 := instance(t, readFile(t, "../../testdata/wasm/trap.wasm"))
	m2.Set(1000)
	if _, err := mod2.ExportedFunction("handle").Call(ctx); err == nil || m2.Exhausted() {
		t.Fatalf("trap.wasm: err %v, exhausted %v", err, m2.Exhausted())
	}
}

// TestInterruptSpinningGuest proves that a guest spinning with unlimited
// fuel, in a runtime without close-on-context-done, lets a garbage
// collection finish and traps soon after another goroutine interrupts it:
// the compiled checks see the floor refill lowers (they re-read it) and
// call refill once per Slice.
func TestInterruptSpinningGuest(t *testing.T) {
	const bound = 2 * time.Second // generous: the machine may be loaded
	cases := []struct {
		name, file, fn string
	}{
		{"wat loop", "testdata/wat/count.wasm", "spin"},
		{"go spin_command", "../../testdata/wasm/spin_command.wasm", "_start"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if (testing.Short() || raceEnabled) && strings.HasSuffix(c.file, "_command.wasm") {
				t.Skip("-short or -race: compiling a Go module takes seconds (minutes under -race)")
			}
			bin := readFile(t, c.file)
			var worst time.Duration
			for range 10 {
				// a fresh instance each time: Go's _start cannot run twice
				mod, m := instance(t, bin)
				fn := mod.ExportedFunction(c.fn)
				m.Set(Unlimited)
				fired := make(chan time.Time, 1)
				// Go cannot preempt a goroutine in wazero's compiled code; a
				// garbage collection while the guest spins must still finish
				// (at the guest's next refill) or nothing else would run.
				timer := time.AfterFunc(20*time.Millisecond, func() {
					runtime.GC()
					fired <- time.Now()
					m.Interrupt()
				})
				_, err := fn.Call(m.Context(context.Background()))
				returned := time.Now()
				timer.Stop()
				if !m.Interrupted() {
					t.Fatalf("returned before the interrupt: %v", err)
				}
				if err == nil || !strings.Contains(err.Error(), "unreachable") || !m.Exhausted() {
					t.Fatalf("err %v, remaining %d", err, m.Remaining())
				}
				mod.Close(context.Background())
				delay := returned.Sub(<-fired)
				worst = max(worst, delay)
				if delay > bound {
					t.Fatalf("trapped %v after the interrupt", delay)
				}
			}
			t.Logf("worst delay from Interrupt to return: %v", worst)
		})
	}
}

// TestContextStopsSpinningGuest: the end of the call's context stops a
// spinning guest at its next refill, without anyone calling Interrupt.
func TestContextStopsSpinningGuest(t *testing.T) {
	bin := readFile(t, "testdata/wat/count.wasm")
	for _, end := range []string{"cancel", "deadline"} {
		t.Run(end, func(t *testing.T) {
			mod, m := instance(t, bin)
			defer mod.Close(context.Background())
			m.Set(Unlimited)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if end == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
			}
			start := time.Now()
			_, err := mod.ExportedFunction("spin").Call(m.Context(ctx))
			if err == nil || !m.Interrupted() || !m.Exhausted() {
				t.Fatalf("err %v, interrupted %v, exhausted %v", err, m.Interrupted(), m.Exhausted())
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("stopped after %v", d)
			}
			m.Set(Unlimited)
			if m.Interrupted() {
				t.Fatal("Set did not clear the interrupt")
			}
		})
	}
}

// TestRefusesHostileModules checks that malformed or hostile modules are
// refused with handler-shape-invalid and never panic.
func TestRefusesHostileModules(t *testing.T) {
	features := readFile(t, "testdata/wat/features.wasm")
	section := func(id byte, body []byte) []byte {
		b := []byte("\x00asm\x01\x00\x00\x00")
		b = append(b, id)
		b = wasmbin.AppendULEB(b, uint64(len(body)))
		return append(b, body...)
	}
	deep := func(n int) []byte { // one function: n nested blocks
		expr := []byte{}
		for range n {
			expr = append(expr, 0x02, 0x40)
		}
		for range n + 1 {
			expr = append(expr, 0x0b)
		}
		body := wasmbin.AppendULEB([]byte{0}, 0)[:1] // no locals
		body = append(body, expr...)
		code := wasmbin.AppendULEB(nil, 1)
		code = wasmbin.AppendULEB(code, uint64(len(body)))
		code = append(code, body...)
		m := section(1, []byte{1, 0x60, 0, 0})
		m = append(m, section(3, []byte{1, 0})[8:]...)
		return append(m, section(10, code)[8:]...)
	}
	if _, _, err := Instrument(deep(100)); err != nil {
		t.Fatalf("100 nested blocks: %v", err)
	}
	cases := map[string][]byte{
		"empty":              nil,
		"no magic":           []byte("\x00wasm\x01\x00\x00\x00"),
		"component":          []byte("\x00asm\x0d\x00\x01\x00"),
		"section past end":   append([]byte("\x00asm\x01\x00\x00\x00\x01\x05"), 1, 2),
		"huge type count":    section(1, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}),
		"huge code count":    section(10, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}),
		"huge global count":  section(6, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}),
		"huge import count":  section(2, []byte{0xff, 0xff, 0xff, 0x7f}),
		"huge local count":   section(10, []byte{1, 8, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x7f, 0x0b}),
		"LEB too long":       section(8, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}),
		"LEB overflow":       section(8, []byte{0xff, 0xff, 0xff, 0xff, 0x7f}),
		"unknown section":    section(14, nil),
		"sections reordered": append(section(3, []byte{0}), section(1, []byte{0})[8:]...),
		"repeated section":   append(section(1, []byte{0}), section(1, []byte{0})[8:]...),
		"trailing in start":  section(8, []byte{0, 0}),
		"unknown opcode":     section(10, []byte{1, 3, 0, 0xff, 0x0b}),
		"unknown 0xfc":       section(10, []byte{1, 4, 0, 0xfc, 0x20, 0x0b}),
		"unknown simd":       section(10, []byte{1, 5, 0, 0xfd, 0x9a, 0x01, 0x0b}),
		"body without end":   section(10, []byte{1, 3, 0, 0x01, 0x01}),
		"trailing after end": section(10, []byte{1, 3, 0, 0x0b, 0x01}),
		"deep nesting":       deep(MaxNesting + 1),
		"reserved export":    section(7, append(appendName([]byte{1}, GlobalExport), KindGlobal, 0)),
		"typed reference":    section(10, []byte{1, 5, 0, 0x02, 0x6b, 0x01, 0x0b, 0x0b}),
		"reserved import":    section(2, append(appendName(appendName([]byte{1}, ImportModule), "x"), KindFunc, 0)),
		"table initialiser":  section(4, []byte{1, 0x40, 0x00, 0x70, 0x00, 0x01, 0xd2, 0x00, 0x0b}),
		// invalid modules whose out-of-range indices would name the pass's
		// own globals and local after instrumentation
		"writes the fuel global": readFile(t, "testdata/wat/hostile_global.wasm"),
		"writes the fuel local":  readFile(t, "testdata/wat/hostile_local.wasm"),
	}
	for name, bin := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Instrument(bin)
			var te *toolerr.Error
			if !errors.As(err, &te) || te.Code != toolerr.HandlerShapeInvalid {
				t.Fatalf("err = %v, want handler-shape-invalid", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v wraps neither ErrMalformed nor ErrUnsupported", err)
			}
		})
	}
	// every truncation of a valid module is refused or still valid, never a panic
	for n := range len(features) {
		if _, _, err := Instrument(features[:n]); err != nil && !errors.Is(err, toolerr.HandlerShapeInvalid) {
			t.Fatalf("truncated at %d: %v", n, err)
		}
	}
}

// TestNameSection checks that function names survive (wazero shows them in
// stack traces), label names are dropped and the fuel global is named.
func TestNameSection(t *testing.T) {
	bin := readFile(t, "../../testdata/wasm/trap.wasm")
	m, err := Decode(bin)
	if err != nil {
		t.Fatal(err)
	}
	names := m.Sections[len(m.Sections)-1]
	if names.ID != secCustom || names.Name != "name" {
		t.Fatalf("trap.wasm has no trailing name section")
	}
	// add a label-names subsection (3) and a global-names one (7)
	labels := []byte{1, 0, 1, 0, 1, 'L'} // function 0: label 0 "L"
	names.Raw = append(append(names.Raw, 3, byte(len(labels))), labels...)
	globals := []byte{1, 0, 1, 'g'}
	names.Raw = append(append(names.Raw, 7, byte(len(globals))), globals...)
	withNames := m.Encode()
	out := mustInstrumentBytes(t, withNames)
	om, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	raw := om.Sections[len(om.Sections)-1].Raw
	r := wasmbin.NewReader(raw, 0)
	var ids []byte
	var g7 []byte
	for !r.EOF() {
		id, _ := r.Byte()
		n, _ := r.U32()
		body, err := r.Bytes(uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if id == 7 {
			g7 = body
		}
	}
	if strings.Contains(string(ids), "\x03") {
		t.Errorf("label names kept: subsections %v", ids)
	}
	want := append([]byte{3, 0, 1, 'g', 0}, appendName(nil, GlobalExport)...)
	want = append(append(want, 1), appendName(nil, LimitExport)...)
	if string(g7) != string(want) {
		t.Errorf("global names = %q, want %q", g7, want)
	}
	mod, _ := instance(t, withNames)
	_, err = mod.ExportedFunction("handle").Call(context.Background())
	if err == nil || !strings.Contains(err.Error(), "explode") || !strings.Contains(err.Error(), "handle") {
		t.Fatalf("stack trace lost the function names: %v", err)
	}
}

// TestHarnessSeesDifferences keeps the differential harness honest: two
// modules that differ only in a constant written to memory, or returned,
// give different outcomes.
func TestHarnessSeesDifferences(t *testing.T) {
	mod := func(ret, stored byte) []byte {
		// (memory 1) (func (export "f") (result i32) (i32.store (i32.const 0) (i32.const stored)) (i32.const ret))
		b := []byte("\x00asm\x01\x00\x00\x00")
		b = append(b, 1, 5, 1, 0x60, 0, 1, 0x7f)
		b = append(b, 3, 2, 1, 0)
		b = append(b, 5, 3, 1, 0, 1)
		b = append(b, 7, 5, 1, 1, 'f', 0, 0)
		body := []byte{0, 0x41, 0, 0x41, stored, 0x36, 2, 0, 0x41, ret, 0x0b}
		b = append(b, 10, byte(len(body)+2), 1, byte(len(body)))
		return append(b, body...)
	}
	run := func(b []byte) string { return runModule(t, b, runOpts{timeout: time.Minute}).String() }
	base := run(mod(1, 1))
	if base != run(mod(1, 1)) || base == run(mod(2, 1)) || base == run(mod(1, 2)) {
		t.Fatal("the harness does not tell results or memory apart")
	}
	if !strings.Contains(base, "f: [1]") {
		t.Fatalf("outcome %s", base)
	}
}

// TestDeterministicGoGuest runs a Go guest (Go's runtime, GC and scheduler
// included) three times with wazero's default fake clocks and seeded random
// source: it uses the same fuel every time. (With real clocks the Go
// runtime's behaviour, and so the count, depends on timing: a deterministic
// mode must keep the fakes.)
func TestDeterministicGoGuest(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: compiling a Go module takes seconds (minutes under -race)")
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	c, err := r.CompileModule(ctx, mustInstrumentBytes(t, readFile(t, "../../testdata/wasm/go_echo_command.wasm")))
	if err != nil {
		t.Fatal(err)
	}
	// the SDK's sandboxd_v1 imports, stubbed (a command does not call them)
	stubs := map[string]wazero.HostModuleBuilder{}
	for _, f := range c.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == wasi_snapshot_preview1.ModuleName || mod == ImportModule {
			continue
		}
		if stubs[mod] == nil {
			stubs[mod] = r.NewHostModuleBuilder(mod)
		}
		stubs[mod].NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}),
			f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	for _, b := range stubs {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var first int64
	for i := range 3 {
		var stdout strings.Builder
		mc := wazero.NewModuleConfig().WithName("").WithStartFunctions().
			WithStdin(strings.NewReader(`{"message":"hello","n":[1,2,3]}`)).WithStdout(&stdout)
		mod, err := r.InstantiateModule(ctx, c, mc)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMeter(mod)
		if err != nil {
			t.Fatal(err)
		}
		m.Set(Unlimited)
		if _, err := mod.ExportedFunction("_start").Call(m.Context(ctx)); err != nil && !strings.Contains(err.Error(), "exit_code(0)") {
			t.Fatalf("_start: %v", err)
		}
		used := Unlimited - m.Remaining()
		if !strings.Contains(stdout.String(), "hello") {
			t.Fatalf("output %q", stdout.String())
		}
		if i == 0 {
			first = used
			t.Logf("go_echo_command used %d fuel", used)
		} else if used != first {
			t.Fatalf("run %d used %d fuel, run 0 used %d", i, used, first)
		}
		mod.Close(ctx)
	}
}

// TestChargeDeficit: charged per segment, the count drops below the floor
// between two checks (testdata/wat/deficit.wat: 1 at the entry check, then
// 201 by a charge without a comparison). With a budget of 100 the host must
// still tell the pass's trap from the guest's own: a trap in a host function
// after the sync is the guest's (Exhausted false, though the synced counter
// is below the floor and below 0); a call that ends with nothing left to
// check returns, overdrawn (the host's check at the end of the call sees
// it: executor's TestFuelOverdraft); the next check traps, exactly at what
// the guest had been charged (203; $callee's loop header charges 1 more: 204 in all).
func TestChargeDeficit(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	ownTrap := errors.New("the guest's own failure")
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) { panic(ownTrap) }), nil, nil).
		Export("fail").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.InstantiateWithConfig(ctx, mustInstrumentBytes(t, readFile(t, "testdata/wat/deficit.wasm")), wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMeter(mod)
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, budget int64) ([]uint64, error) {
		m.Set(budget)
		return mod.ExportedFunction(name).Call(m.Context(ctx))
	}
	for range 3 { // the same every time
		if _, err := call("host_trap", 100); !errors.Is(err, ownTrap) || m.Exhausted() || m.OutOfFuel() || m.Remaining() != -102 {
			t.Fatalf("host_trap: err %v, exhausted %v, out of fuel %v, remaining %d (want the guest's trap at -102)", err, m.Exhausted(), m.OutOfFuel(), m.Remaining())
		}
		if res, err := call("returns", 100); err != nil || res[0] != 7 || m.Exhausted() || m.Remaining() != -102 {
			t.Fatalf("returns: %v %v, exhausted %v, remaining %d (want 7, overdrawn to -102)", res, err, m.Exhausted(), m.Remaining())
		}
		if _, err := call("calls", 100); err == nil || !m.Exhausted() || !m.OutOfFuel() || m.Interrupted() || m.Remaining() != -103 {
			t.Fatalf("calls: err %v, exhausted %v, out of fuel %v, remaining %d (want the budget trap at -103)", err, m.Exhausted(), m.OutOfFuel(), m.Remaining())
		}
		if _, err := call("calls", 204); err != nil || m.Remaining() != 0 {
			t.Fatalf("calls with 204: err %v, remaining %d", err, m.Remaining())
		}
		if _, err := call("calls", 203); err == nil || !m.OutOfFuel() || m.Remaining() != -1 {
			t.Fatalf("calls with 203: err %v, out of fuel %v, remaining %d", err, m.OutOfFuel(), m.Remaining())
		}
	}
}
