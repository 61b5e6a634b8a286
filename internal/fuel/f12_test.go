package fuel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Hand-built modules for the decoder-agreement tests (F12). The bytes follow
// the red-team reproducers of finding F12 (a generator script for each).

func wvec(items ...[]byte) []byte {
	out := wasmbin.AppendULEB(nil, uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func wsection(id byte, body []byte) []byte {
	return append(wasmbin.AppendULEB([]byte{id}, uint64(len(body))), body...)
}

func wname(s string) []byte { return appendName(nil, s) }

func wcat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// handleModule is a reactor exporting memory and handle: () -> i32 whose
// body (after the local declarations) is code.
func handleModule(code []byte) []byte {
	body := append([]byte{0x00}, code...)
	return wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x01, 0x7f})),
		wsection(secFunction, wvec([]byte{0x00})),
		wsection(secMemory, wvec([]byte{0x00, 0x01})),
		wsection(secExport, wvec(wcat(wname("memory"), []byte{KindMemory, 0}), wcat(wname("handle"), []byte{KindFunc, 0}))),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(body))), body...))))
}

// hiddenLoop is F12's handle body: `block; br 0; fd <sub> <next>; <16
// bytes>; end; i32.const 0; end`, where the 16 bytes hold `end; loop br 0
// end; block` padded with nops. wazero reads `fd sub` as one instruction;
// a pass reading a LEB128 sub-opcode of 12 (v128.const) skips the loop.
func hiddenLoop(sub, next byte) []byte {
	hidden := []byte{0x0b, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x02, 0x40}
	for len(hidden) < 16 {
		hidden = append(hidden, 0x01)
	}
	code := []byte{0x02, 0x40, 0x0c, 0x00, 0xfd, sub, next}
	code = append(code, hidden...)
	return handleModule(append(code, 0x0b, 0x41, 0x00, 0x0b))
}

// hiddenTableSet is gen_tableset.py: handle stores whether table[0] is
// null, then hides `table.set 0 (ref.func f)` behind fd 8c 00. The
// reproducer uses f = 2, handle's index after the pass's renumbering (the
// hidden bytes are not renumbered): only the instrumented module is valid.
// f = 1 is handle before the pass: wazero accepts the input too.
func hiddenTableSet(f byte) []byte {
	hidden := []byte{0x0b, 0x41, 0x00, 0xd2, f, 0x26, 0x00, 0x02, 0x40}
	for len(hidden) < 16 {
		hidden = append(hidden, 0x01)
	}
	code := []byte{0x00,
		0x41, 0xc8, 0x01, 0x41, 0x30, 0x41, 0x00, 0x25, 0x00, 0xd1, 0x6a, 0x3a, 0x00, 0x00,
		0x41, 0xc8, 0x01, 0x41, 0x01, 0x10, 0x00, 0x1a,
		0x02, 0x40, 0x0c, 0x00, 0xfd, 0x8c, 0x00}
	code = append(code, hidden...)
	code = append(code, 0x0b, 0x41, 0x00, 0x0b)
	return wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x01, 0x7f}, []byte{0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f})),
		wsection(secImport, wvec(wcat(wname("sandboxd_v1"), wname("output_set"), []byte{KindFunc, 0x01}))),
		wsection(secFunction, wvec([]byte{0x00})),
		wsection(secTable, wvec([]byte{0x70, 0x00, 0x01})),
		wsection(secMemory, wvec([]byte{0x00, 0x01})),
		wsection(secExport, wvec(wcat(wname("memory"), []byte{KindMemory, 0}), wcat(wname("handle"), []byte{KindFunc, 1}))),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(code))), code...))))
}

// backstopRun instantiates an instrumented module under a runtime that also
// closes modules when their context is done (a test-only backstop the
// product does not rely on), gives it budget fuel and calls every exported
// function with zero arguments under a deadline. It fails the test when a
// call is stopped by the backstop instead of by fuel: a loop the pass did
// not meter. It returns how many calls ran out of fuel.
func backstopRun(t testing.TB, inst []byte, budget int64, deadline time.Duration) (exhausted int) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2).WithCloseOnContextDone(true).WithMemoryLimitPages(maxPages))
	defer r.Close(ctx)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	compiled, err := r.CompileModule(ctx, inst)
	if err != nil && strings.Contains(err.Error(), "over limit") {
		return 0 // more memory than the test runs with
	}
	if err != nil {
		t.Fatalf("wazero refuses the instrumented module: %v", err)
	}
	stubs := map[string]wazero.HostModuleBuilder{}
	for _, f := range compiled.ImportedFunctions() {
		modName, name, _ := f.Import()
		if modName == ImportModule {
			continue
		}
		b, ok := stubs[modName]
		if !ok {
			b = r.NewHostModuleBuilder(modName)
			stubs[modName] = b
		}
		// Every import, WASI included, is a stub that does nothing and
		// charges a unit, as the executor's host functions charge for
		// their work: a guest spinning on host calls runs out of fuel.
		results := f.ResultTypes()
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
			Charge(ctx, 1)
			for i := range results {
				stack[i] = 0
			}
		}), f.ParamTypes(), results).Export(name)
	}
	for name, b := range stubs {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatalf("stub %s: %v", name, err)
		}
	}
	mod, err := r.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		return 0 // a trap in an active segment: nothing ran
	}
	meter, err := NewMeter(mod)
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, fn api.Function) {
		cctx, cancel := context.WithTimeout(meter.Context(WithTableAccount(ctx, unlimitedTables{})), deadline)
		defer cancel()
		meter.Set(budget)
		start := time.Now()
		_, err := fn.Call(cctx, make([]uint64, len(fn.Definition().ParamTypes()))...)
		took := time.Since(start)
		switch {
		case err != nil && meter.Exhausted():
			exhausted++
		case cctx.Err() != nil:
			t.Fatalf("%s: stopped by the context backstop after %v, not by fuel (budget %d, %d left): a loop the pass did not meter", name, took, budget, meter.Remaining())
		case err == nil && budget-meter.Remaining() < 0:
			t.Fatalf("%s: fuel went up", name)
		}
	}
	if fn := mod.ExportedFunction(StartExport); fn != nil {
		call(StartExport, fn)
	}
	for name := range compiled.ExportedFunctions() {
		if name == StartExport {
			continue
		}
		if mod.IsClosed() {
			break
		}
		call(name, mod.ExportedFunction(name))
	}
	return exhausted
}

// unlimitedTables grants every table growth (the tests' account).
type unlimitedTables struct{}

func (unlimitedTables) ReserveTable(int64) bool { return true }
func (unlimitedTables) ReleaseTable(int64)      {}

// checkRefusedOrMetered instruments bin: a refusal must be
// handler-shape-invalid; an accepted module must compile, and each call
// must stop by fuel or return, never by the backstop.
func checkRefusedOrMetered(t *testing.T, bin []byte) (refused bool) {
	t.Helper()
	out, _, err := Instrument(bin)
	if err != nil {
		if !errors.Is(err, toolerr.HandlerShapeInvalid) {
			t.Fatalf("refusal is not handler-shape-invalid: %v", err)
		}
		return true
	}
	backstopRun(t, out, 1_000_000, 2*time.Second)
	return false
}

// wazeroAccepts reports whether wazero compiles bin.
func wazeroAccepts(t testing.TB, bin []byte) bool {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	c, err := compileGuarded(t, ctx, r, bin)
	if err == nil {
		c.Close(ctx)
	}
	return err == nil
}

// TestF12HiddenLoop: the F12 reproducer (fd 8c 00 hides a loop) is refused,
// and so is every 0xfd sub-opcode at or above 0x80 that is not followed by
// the 0x01 of its spec encoding; the spec encoding itself is accepted and
// metered.
func TestF12HiddenLoop(t *testing.T) {
	bin := hiddenLoop(0x8c, 0x00)
	if !wazeroAccepts(t, bin) {
		t.Fatal("wazero refuses the reproducer: it no longer shows the disagreement")
	}
	if !checkRefusedOrMetered(t, bin) {
		t.Fatal("the F12 module was accepted")
	}
	// Every valid SIMD opcode >= 0x80 followed by a byte other than 0x01.
	for sub := 0x80; sub <= 0xff; sub++ {
		if wasmbin.ScanExpr(wasmbin.NewReader([]byte{0xfd, byte(sub), 0x01, 0x0b}, 0), wasmbin.Refuse, nil) != nil {
			continue // an unassigned opcode
		}
		for _, next := range []byte{0x00, 0x02, 0x03, 0x0b, 0x80} {
			if !checkRefusedOrMetered(t, hiddenLoop(byte(sub), next)) {
				t.Errorf("fd %#x %#x accepted", sub, next)
			}
		}
	}
	// The spec encoding of i16x8.shr_s (fd 8c 01) is what wazero reads as
	// i16x8.shr_s; nop: accepted, and it runs to the end.
	ok := handleModule([]byte{0xfd, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // v128.const 0
		0x41, 0x01, 0xfd, 0x8c, 0x01, 0xfd, 0x1b, 0x00, 0x0b}) // i32.const 1, i16x8.shr_s, i32x4.extract_lane 0
	if checkRefusedOrMetered(t, ok) {
		t.Fatal("the spec encoding fd 8c 01 was refused")
	}
}

// TestF12Variants: non-minimal or non-canonical encodings after a prefix
// byte and in the reserved bytes wazero reads as one byte are refused; a
// loop hidden behind each one is never run unmetered.
func TestF12Variants(t *testing.T) {
	loopTail := []byte{0x0b, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x02, 0x40, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01}
	cases := map[string][]byte{
		// 0xfc sub-opcodes padded: LEB 8a 00 is memory.copy
		"fc padded memory.copy": {0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x8a, 0x00, 0x00, 0x00, 0x41, 0, 0x0b},
		"fc padded trunc_sat":   {0x43, 0, 0, 0, 0, 0xfc, 0x80, 0x00, 0x0b},
		"fc 5-byte sub":         {0x43, 0, 0, 0, 0, 0xfc, 0x80, 0x80, 0x80, 0x80, 0x00, 0x0b},
		// 0xfd sub-opcodes padded: the spec reads 12 (v128.const), wazero 0x8c
		"fd padded v128.const": append([]byte{0x02, 0x40, 0x0c, 0x00, 0xfd, 0x8c, 0x80, 0x00}, append(loopTail[:15:15], 0x0b, 0x41, 0, 0x0b)...),
		"fd 80 02 (relaxed)":   {0xfd, 0x80, 0x02, 0x0b, 0x41, 0, 0x0b},
		// 0xfe: wazero reads one byte
		"fe padded": {0x41, 0, 0xfe, 0x90, 0x00, 0x02, 0x00, 0x0b},
		// memory.size / memory.grow / memory.fill reserved byte padded
		"memory.size padded":  {0x3f, 0x80, 0x00, 0x0b},
		"memory.grow padded":  {0x41, 0, 0x40, 0x80, 0x00, 0x0b},
		"memory.fill padded":  {0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x0b, 0x80, 0x00, 0x41, 0, 0x0b},
		"memory.copy nonzero": {0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x0a, 0x00, 0x01, 0x41, 0, 0x0b},
		// multi-memory memarg: align with the 0x40 bit and a memory index
		"memarg multi-memory": {0x41, 0, 0x28, 0x40, 0x00, 0x00, 0x0b},
		// select with a padded type count
		"select t* padded": {0x41, 1, 0x41, 2, 0x41, 0, 0x1c, 0x81, 0x00, 0x7f, 0x0b},
	}
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			if !checkRefusedOrMetered(t, handleModule(code)) {
				t.Errorf("accepted")
			}
		})
	}
	// Padded LEBs outside prefixes (Go's linker writes them in calls and
	// constants) read the same length in both decoders: accepted and run.
	padded := handleModule([]byte{0x41, 0x81, 0x80, 0x80, 0x80, 0x00, 0x0b}) // i32.const 1 in 5 bytes
	if checkRefusedOrMetered(t, padded) {
		t.Error("a padded i32.const was refused")
	}
}

// TestF12HiddenTableSet: the table.set hidden from the reset analysis by the
// same disagreement is refused with the module; the same table.set encoded
// plainly makes the module not resettable.
func TestF12HiddenTableSet(t *testing.T) {
	if !wazeroAccepts(t, hiddenTableSet(1)) {
		t.Fatal("wazero refuses the variant valid before the pass")
	}
	for _, f := range []byte{2, 1} {
		if _, st, err := Instrument(hiddenTableSet(f)); err == nil {
			t.Fatalf("ref.func %d: the hidden table.set module was accepted (resettable %v)", f, st.Resettable)
		} else if !errors.Is(err, toolerr.HandlerShapeInvalid) {
			t.Fatalf("refusal is not handler-shape-invalid: %v", err)
		}
	}
	// Whatever the pass accepts, the reset analysis saw: the table.set
	// written where both decoders see it makes the module not resettable.
	plain := []byte{0x41, 0x00, 0xd2, 0x00, 0x26, 0x00, 0x41, 0x00, 0x0b}
	b := wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x01, 0x7f})),
		wsection(secFunction, wvec([]byte{0x00})),
		wsection(secTable, wvec([]byte{0x70, 0x00, 0x01})),
		wsection(secMemory, wvec([]byte{0x00, 0x01})),
		wsection(secExport, wvec(wcat(wname("memory"), []byte{KindMemory, 0}), wcat(wname("handle"), []byte{KindFunc, 0}))),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(plain)+1)), append([]byte{0}, plain...)...))))
	if !wazeroAccepts(t, b) {
		t.Fatal("wazero refuses the plain table.set module")
	}
	_, st, err := Instrument(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Resettable {
		t.Error("a module using table.set is resettable")
	}
}
