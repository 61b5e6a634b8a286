package fuel

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

// The differential oracle of decoder agreement (issue 12 §1): for modules
// wazero compiles — byte mutations of the repository's guests and of the
// binaryen corpus, fresh `wasm-opt -ttf` modules, and fuzz inputs — the
// instrumented module must
//
//   - like the input, be read by wasmbin's scanner as wazero reads it
//     (checkScansAsWazero);
//   - compile in wazero (checkAgreementStatic), and re-scanning it must find
//     the pass's check at every function entry and every loop header, and
//     a charge in every loop of the pass's helpers;
//   - when run with a small budget under a close-on-context-done backstop
//     (backstopRun), stop by fuel or return, never by the backstop: a call
//     the backstop stops ran a loop the pass did not meter.

// oracleBudget is the fuel of an oracle run: milliseconds of guest code even
// under close-on-context-done.
const oracleBudget = 300_000

// checkAgreement instruments bin (which wazero compiles) and applies both
// checks. It returns false when the pass refused bin (an allowed answer,
// as handler-shape-invalid) or its tables are too large to run.
func checkAgreement(t testing.TB, bin []byte) bool {
	t.Helper()
	checkScansAsWazero(t, "input", bin)
	out, st, err := Instrument(bin)
	if err != nil {
		if !errors.Is(err, toolerr.HandlerShapeInvalid) {
			t.Fatalf("refusal is not handler-shape-invalid: %v", err)
		}
		return false
	}
	checkAgreementStatic(t, out, st)
	if st.TableElems > 1<<20 {
		return false
	}
	backstopRun(t, out, oracleBudget, 2*time.Second)
	return true
}

// checkAgreementStatic: wazero compiles the output, and every function of
// the module has the check at its entry and after every loop header (the
// pass's helpers: a charge, a call of refill, in every loop).
func checkAgreementStatic(t testing.TB, out []byte, st *Stats) {
	t.Helper()
	if !wazeroAccepts(t, out) {
		ctx := context.Background()
		r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
		defer r.Close(ctx)
		_, err := r.CompileModule(ctx, out)
		t.Fatalf("wazero accepts the input but not the output: %v", err)
	}
	checkScansAsWazero(t, "output", out)
	m, err := Decode(out)
	if err != nil {
		t.Fatalf("the output does not decode: %v", err)
	}
	code := m.section(secCode)
	if code == nil {
		return
	}
	nimp := uint32(1)
	if st.TableImports {
		nimp = 3
	}
	own := len(code.Funcs) - st.Helpers
	for i, f := range code.Funcs {
		if err := checkLoops(f.Expr, st, i >= own); err != nil {
			t.Fatalf("function %d of %d (%d helpers): %v", int(st.Refill+nimp)+i, len(code.Funcs), st.Helpers, err)
		}
	}
}

// checkScansAsWazero: the shared scanner reading as wazero does
// (wasmbin.AsWazero, the compile budget's reading through wasmbin.Shapes)
// reads every function of a module wazero compiles. The pass's own reading
// (wasmbin.Refuse) is checked by Instrument on the input and by checkLoops
// on the output.
func checkScansAsWazero(t testing.TB, what string, bin []byte) {
	t.Helper()
	if _, err := wasmbin.Shapes(bin); err != nil {
		t.Fatalf("wazero compiles the %s but wasmbin.Shapes (AsWazero) cannot read it: %v", what, err)
	}
}

// checkLoops re-scans an instrumented body: a check (the counter's
// decrement, from the local or the global) right at the entry and after
// every loop header, or, in a function with no loop and no call (a leaf),
// a charge of the counter at the entry; in a helper, a call of refill
// inside every loop.
func checkLoops(expr []byte, st *Stats, helper bool) error {
	isCheck := func(at int) bool {
		r := wasmbin.NewReader(expr, at)
		op, err := r.Byte()
		if err != nil {
			return false
		}
		idx, err := r.U32()
		if err != nil {
			return false
		}
		if c, err := r.Byte(); err != nil || c != 0x42 { // i64.const C
			return false
		}
		if _, err := r.SLEB(64); err != nil {
			return false
		}
		if c, err := r.Byte(); err != nil || c != 0x7d { // i64.sub
			return false
		}
		next, err := r.Byte()
		if err != nil {
			return false
		}
		idx2, err := r.U32()
		switch {
		case err != nil:
			return false
		case op == 0x20: // local.get $d ... local.tee $d
			return next == 0x22 && idx2 == idx
		case op == 0x23: // global.get $fuel ... global.set $fuel
			return idx == st.FuelGlobal && next == 0x24 && idx2 == st.FuelGlobal
		}
		return false
	}
	// A function keeping its count in a local loads it first:
	// global.get $fuel; global.get $limit; i64.sub; local.set $d.
	entry := 0
	if r := wasmbin.NewReader(expr, 0); len(expr) > 0 && expr[0] == 0x23 {
		r.SetOffset(1)
		if g, err := r.U32(); err == nil && g == st.FuelGlobal && r.Offset() < len(expr) && expr[r.Offset()] == 0x23 {
			r.SetOffset(r.Offset() + 1)
			if g, err := r.U32(); err == nil && g == st.LimitGlobal && r.Offset()+1 < len(expr) && expr[r.Offset()] == 0x7d && expr[r.Offset()+1] == 0x21 {
				r.SetOffset(r.Offset() + 2)
				if _, err := r.U32(); err == nil {
					entry = r.Offset()
				}
			}
		}
	}
	// A leaf (no loop, no call) has a charge of the counter itself at its
	// entry instead: global.get $fuel; i64.const C; i64.sub; local.set $d.
	isLeafEntry := func() bool {
		r := wasmbin.NewReader(expr, 0)
		if op, err := r.Byte(); err != nil || op != 0x23 {
			return false
		}
		if g, err := r.U32(); err != nil || g != st.FuelGlobal {
			return false
		}
		if c, err := r.Byte(); err != nil || c != 0x42 {
			return false
		}
		if c, err := r.SLEB(64); err != nil || c < 1 {
			return false
		}
		if c, err := r.Byte(); err != nil || c != 0x7d {
			return false
		}
		c, err := r.Byte()
		return err == nil && c == 0x21
	}
	leaf := false
	if !helper && !isCheck(entry) {
		if !isLeafEntry() {
			return fmt.Errorf("no check at the function's entry")
		}
		leaf = true
	}
	type frame struct {
		loop, refilled bool
		at             int
	}
	stack := []frame{{}}
	var bad error
	err := wasmbin.ScanExpr(wasmbin.NewReader(expr, 0), wasmbin.Refuse, func(k wasmbin.Op, start, end int) {
		if bad != nil {
			return
		}
		if leaf && (k == wasmbin.OpLoop || k == wasmbin.OpFunc && expr[start] != 0xd2 ||
			k == wasmbin.OpOther && (expr[start] == 0x11 || expr[start] == 0x13)) {
			bad = fmt.Errorf("a function metered as a leaf loops or calls at offset %d", start)
			return
		}
		switch k {
		case wasmbin.OpLoop:
			// The outer loop of a versioned loop (see appendLoopOpen)
			// begins with block, then the loop itself, whose header this
			// scan reaches next and which must have the check: every
			// iteration of the outer loop passes it.
			outer := end+4 <= len(expr) && expr[end] == 0x02 && expr[end+1] == 0x40 && expr[end+2] == 0x03 && versionable(expr[end+3:end+4])
			if !helper && !outer && !isCheck(end) {
				bad = fmt.Errorf("no check after the loop header at offset %d", start)
			}
			stack = append(stack, frame{loop: true, at: start})
		case wasmbin.OpBlock, wasmbin.OpIf:
			stack = append(stack, frame{})
		case wasmbin.OpFunc:
			r := wasmbin.NewReader(expr, start+1)
			if f, err := r.U32(); err == nil && expr[start] == 0x10 && f == st.Refill {
				for i := range stack {
					stack[i].refilled = true
				}
			}
		case wasmbin.OpEnd:
			top := stack[len(stack)-1]
			if helper && top.loop && !top.refilled {
				bad = fmt.Errorf("a helper's loop at offset %d has no charge", top.at)
			}
			stack = stack[:len(stack)-1]
		}
	})
	if err != nil {
		return fmt.Errorf("the output does not scan: %v", err)
	}
	return bad
}

// compileGuarded compiles bin in r. wazero panics on some invalid modules
// instead of refusing them (v1.12's validator on a call of a function whose
// type index does not exist): a panic is returned as an error, and the test
// fails unless wasmbin.CheckBudget, which the executor runs before it
// compiles anything, refuses bin.
func compileGuarded(t testing.TB, ctx context.Context, r wazero.Runtime, bin []byte) (c wazero.CompiledModule, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("wazero panicked: %v", p)
			if wasmbin.CheckBudget(bin, wasmbin.Budget{}) == nil {
				t.Errorf("wazero panics compiling a module wasmbin.CheckBudget accepts (the executor would compile it): %v", p)
			}
		}
	}()
	return r.CompileModule(ctx, bin)
}

// mutate returns a copy of b with a few bytes changed, inserted or deleted,
// favouring the bytes that open instructions and prefixes.
func mutate(rng *rand.Rand, b []byte) []byte {
	interesting := []byte{0x00, 0x01, 0x02, 0x03, 0x0b, 0x0c, 0x0d, 0x40, 0x41, 0x7f, 0x80, 0xfc, 0xfd, 0xfe, 0xff}
	out := append([]byte(nil), b...)
	for n := 1 + rng.Intn(3); n > 0 && len(out) > 9; n-- {
		at := 8 + rng.Intn(len(out)-8)
		v := byte(rng.Intn(256))
		if rng.Intn(2) == 0 {
			v = interesting[rng.Intn(len(interesting))]
		}
		switch rng.Intn(4) {
		case 0, 1:
			out[at] = v
		case 2:
			out = append(out[:at], append([]byte{v}, out[at:]...)...)
		default:
			out = append(out[:at], out[at+1:]...)
		}
	}
	return out
}

// oracleSeeds are the modules mutations start from: the pass's WAT
// fixtures, the repository's small guests and part of the binaryen corpus.
func oracleSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{"testdata/wat/*.wasm", "../../testdata/wasm/*.wasm", "testdata/ttf/00*.wasm"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			if b := readFile(t, f); len(b) < 64<<10 {
				seeds = append(seeds, b)
			}
		}
	}
	if len(seeds) == 0 {
		t.Fatal("no seeds")
	}
	return seeds
}

// TestAgreementMutations: byte mutations of the repository's guests that
// wazero compiles are refused or metered (both checks above).
func TestAgreementMutations(t *testing.T) {
	seeds := oracleSeeds(t)
	rng := rand.New(rand.NewSource(12))
	n := 4000
	if testing.Short() || raceEnabled {
		n = 1000
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	compiled, metered, refused := 0, 0, 0
	for i := 0; i < n; i++ {
		bin := limitTables(t, seeds[rng.Intn(len(seeds))])
		bin = mutate(rng, bin)
		c, err := compileGuarded(t, ctx, r, bin)
		if err != nil {
			continue
		}
		c.Close(ctx)
		compiled++
		if checkAgreement(t, bin) {
			metered++
		} else {
			refused++
		}
	}
	t.Logf("%d mutants, %d compile in wazero: %d metered and run, %d refused or too large", n, compiled, metered, refused)
	if compiled == 0 {
		t.Fatal("no mutant compiles: the test checks nothing")
	}
}

// TestAgreementGoGuest: mutations of a Go guest's code section (the
// multi-megabyte modules Go writes, with its padded LEB128 encodings).
func TestAgreementGoGuest(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: each Go module compiles for seconds")
	}
	files, _ := filepath.Glob("../../testdata/wasm/*_reactor.wasm")
	if len(files) == 0 {
		t.Skip("no Go reactor fixture")
	}
	bin := readFile(t, files[0])
	if !checkAgreement(t, limitTables(t, bin)) {
		t.Fatalf("%s was refused", files[0])
	}
	rng := rand.New(rand.NewSource(5))
	for i, tried := 0, 0; i < 2 && tried < 40; tried++ {
		mut := mutate(rng, bin)
		if !wazeroAccepts(t, mut) {
			continue
		}
		i++
		checkAgreement(t, limitTables(t, mut))
	}
}

// TestAgreementBinaryen: fresh modules from binaryen's translate-to-fuzz
// mode (the committed corpus in testdata/ttf is checked by
// TestDifferentialCorpus). Skipped without wasm-opt, except under CI=true.
func TestAgreementBinaryen(t *testing.T) {
	wasmOpt, err := exec.LookPath("wasm-opt")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but wasm-opt (binaryen) is not installed")
		}
		t.Skip("wasm-opt (binaryen) is not installed")
	}
	n := 60
	if testing.Short() || raceEnabled {
		n = 15
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	seed := rng.Int63()
	t.Logf("seed %d", seed)
	rng = rand.New(rand.NewSource(seed))
	kept := 0
	for i := 0; i < n; i++ {
		in := make([]byte, 1024+rng.Intn(7168))
		rng.Read(in)
		inFile, outFile := filepath.Join(dir, "in.bin"), filepath.Join(dir, fmt.Sprintf("%d.wasm", i))
		if err := os.WriteFile(inFile, in, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"-ttf", inFile, "--enable-bulk-memory", "--enable-sign-ext", "--enable-nontrapping-float-to-int",
			"--enable-simd", "--enable-multivalue", "-o", outFile}
		if i%2 == 0 {
			args = append(args, "--enable-reference-types")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := exec.CommandContext(ctx, wasmOpt, args...).Run()
		cancel()
		if err != nil {
			continue
		}
		bin := limitTables(t, readFile(t, outFile))
		if !wazeroAccepts(t, bin) {
			continue // typed function references, which wazero refuses
		}
		kept++
		if !checkAgreement(t, bin) {
			t.Errorf("module %d (seed %d): refused", i, seed)
		}
	}
	t.Logf("%d of %d binaryen modules compile in wazero and were checked", kept, n)
	if kept == 0 {
		t.Fatal("no binaryen module compiles: the test checks nothing")
	}
}

// FuzzInstrumentAgreement: for any input wazero compiles, the pass refuses
// it (handler-shape-invalid) or its output compiles, has a check at every
// function entry and loop header, and runs out of fuel or returns under the
// backstop. The default run (seeds only) is short.
func FuzzInstrumentAgreement(f *testing.F) {
	for _, s := range seedModules(f) {
		f.Add(s)
	}
	f.Add(hiddenLoop(0x8c, 0x00))
	f.Add(hiddenTableSet(1))
	f.Add(readFile(f, "testdata/wat/bulk.wasm"))
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	f.Cleanup(func() { r.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		b2, err := limitTablesErr(b)
		if err != nil {
			return
		}
		// The pass first: what it refuses needs no compilation (wazero's
		// compiler takes tens of seconds on some small hostile inputs the
		// pass refuses at once, such as a 450-byte module declaring 120M
		// locals: the seed bf1775f79da1b998).
		if _, _, err := Instrument(b2); err != nil {
			if !errors.Is(err, toolerr.HandlerShapeInvalid) {
				t.Fatalf("refusal is not handler-shape-invalid: %v", err)
			}
			return
		}
		c, err := compileGuarded(t, ctx, r, b)
		if err != nil {
			return
		}
		c.Close(ctx)
		checkAgreement(t, b2)
	})
}
