package fuel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// diffBudget is the fuel a differential run gets: far more than any
// terminating fixture needs, and a fraction of a second for the ones that
// spin forever.
const diffBudget = 200_000_000

// probeBudget and diffBackstop bound the first, backstopped run of a
// differential test: probeBudget of fuel takes milliseconds of guest code
// even with close-on-context-done, far less than diffBackstop.
const (
	probeBudget  = 2_000_000
	diffBackstop = 2 * time.Second
)

// importsHostFunctions reports whether bin imports any function.
func importsHostFunctions(t testing.TB, bin []byte) bool {
	m, err := Decode(bin)
	if err != nil {
		t.Fatal(err)
	}
	return m.ImportedFuncs > 0
}

// differential runs bin plain and instrumented and fails if they differ in
// anything but fuel exhaustion. It reports whether the instrumented run ran
// out of fuel.
func differential(t *testing.T, bin []byte) (exhausted bool) {
	return differentialWith(t, bin, nil)
}

// differentialWith is differential with provider modules (runOpts).
func differentialWith(t *testing.T, bin []byte, providers map[string][]byte) (exhausted bool) {
	t.Helper()
	bin = limitTables(t, bin)
	inst, _, err := Instrument(bin)
	if err != nil {
		t.Fatalf("instrument: %v", err)
	}
	// First a short run under the context backstop (close-on-context-done
	// makes loops many times slower, so the budget is small): a run the
	// backstop stops did not run out of fuel, a loop the pass did not
	// meter, unless the module spends its time in host functions, which
	// the harness's WASI and stubs do not charge (the executor's do).
	probe := runModule(t, inst, runOpts{metered: true, budget: probeBudget, timeout: diffBackstop, providers: providers})
	if probe.Backstop {
		if !importsHostFunctions(t, bin) {
			t.Fatalf("the instrumented module ran %v without spending %d fuel: a loop the pass did not meter", diffBackstop, probeBudget)
		}
		t.Skipf("spends %v in host calls the harness does not charge", diffBackstop)
	}
	got := runModule(t, inst, runOpts{metered: true, budget: diffBudget, providers: providers})
	timeout := 20 * time.Second
	if got.Exhausted {
		timeout = 300 * time.Millisecond
	}
	want := runModule(t, bin, runOpts{timeout: timeout, providers: providers})
	if got.Exhausted {
		if !want.Exhausted {
			t.Fatalf("instrumented ran out of fuel; plain finished:\n%s", want)
		}
		return true
	}
	if want.Exhausted {
		t.Fatalf("plain timed out; instrumented finished:\n%s", got)
	}
	if g, w := got.String(), want.String(); g != w {
		t.Fatalf("instrumented differs\n--- plain:\n%s\n--- instrumented:\n%s", w, g)
	}
	return false
}

func fixtures(t testing.TB, pattern string) []string {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures match %s (%v)", pattern, err)
	}
	return files
}

// longLoop reports whether a testdata/wasm fixture is one of the hostile
// loops (the interrupt-latency and liveness guests, the output flood) whose
// differential runs take seconds: -short skips them.
func longLoop(name string) bool {
	// g04_extism_kernel loops reset and a 900 MB alloc until stopped: its
	// host calls are slow per unit of fuel (seconds for 8 Slices, over the
	// backstop under -race).
	return strings.HasPrefix(name, "lat_") || strings.HasPrefix(name, "live_") || name == "huge_output_command.wasm" || name == "g04_extism_kernel.wasm"
}

// TestDifferentialFixtures runs every module in testdata/wasm both ways.
func TestDifferentialFixtures(t *testing.T) {
	// modules that spin forever: only fuel (or the timeout) stops them
	spins := map[string]bool{"loop.wasm": true, "init_loop.wasm": true, "spin_command.wasm": true, "huge_output_command.wasm": true}
	for _, f := range fixtures(t, "../../testdata/wasm/*.wasm") {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			bin, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if (testing.Short() || raceEnabled) && len(bin) > 1<<20 {
				t.Skip("-short or -race: compiling a Go module several times takes seconds (minutes under -race)")
			}
			if testing.Short() && longLoop(name) {
				t.Skip("-short: a hostile loop fixture that runs for seconds each way")
			}
			if exportsReserved(t, bin) {
				if _, _, err := Instrument(bin); err == nil {
					t.Fatal("a module exporting a reserved name was instrumented")
				}
				return
			}
			// Other fixtures may spin too (hostile guests); the
			// differential checks that both runs agree on it.
			if exhausted := differential(t, bin); spins[name] && !exhausted {
				t.Errorf("ran out of fuel: %v, want %v", exhausted, spins[name])
			}
		})
	}
}

// TestDifferentialCorpus runs every module of the binaryen corpus
// (testdata/ttf, made by testdata/gen-ttf.sh) both ways.
func TestDifferentialCorpus(t *testing.T) {
	files := fixtures(t, "testdata/ttf/*.wasm")
	if testing.Short() { // every third module: the full run takes them all
		var some []string
		for i := 0; i < len(files); i += 3 {
			some = append(some, files[i])
		}
		files = some
	}
	exhausted := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			bin, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if differential(t, bin) {
				exhausted++
			}
		})
	}
	t.Logf("%d modules, %d ran out of fuel", len(files), exhausted)
}

// exportsReserved reports whether bin exports a name the pass reserves.
func exportsReserved(t testing.TB, bin []byte) bool {
	for _, k := range []byte{KindFunc, KindTable, KindMemory, KindGlobal} {
		for _, n := range exportNames(t, bin, k) {
			if strings.HasPrefix(n, ReservedPrefix) {
				return true
			}
		}
	}
	return false
}
