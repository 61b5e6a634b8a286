package fuel

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"golang.org/x/sys/unix"
)

// goLoopShape is one loop shape of testdata/wasm/go/goloops_reactor: the
// export to call (run(shape, n) or loop_export(n)) and the iterations of a
// benchmark call (about 20 ms plain on a 2-core EPYC VM).
type goLoopShape struct {
	name  string
	shape int32 // run's shape argument; -1 calls loop_export
	n     int64
}

// goLoopShapes lists the corpus in the guest's order.
var goLoopShapes = []goLoopShape{
	{"noinline func", 0, 20_000_000},
	{"wasmexport func", -1, 20_000_000},
	{"calls a func", 1, 10_000_000},
	{"range slice", 2, 20_000_000},
	{"range map", 3, 1_000_000},
	{"nested", 4, 20_000_000},
	{"closure", 5, 20_000_000},
	{"method", 6, 20_000_000},
	{"switch", 7, 20_000_000},
	{"string runes", 8, 5_000_000},
	{"defer/recover", 9, 1_000_000},
	{"interface call", 10, 10_000_000},
	{"append", 11, 5_000_000},
	{"package var", 12, 20_000_000},
}

const goLoopsWasm = "../../testdata/wasm/goloops_reactor.wasm"

// goLoopRig is one instance of the corpus, plain or metered, on its own
// runtime.
type goLoopRig struct {
	r      wazero.Runtime
	mod    api.Module
	run    api.Function
	export api.Function
	meter  *Meter // nil: plain
	ctx    context.Context
}

func newGoLoopRig(tb testing.TB, bin []byte, metered bool) *goLoopRig {
	tb.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	tb.Cleanup(func() { _ = r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := HostModule(ctx, r); err != nil {
		tb.Fatal(err)
	}
	code := bin
	if metered {
		var err error
		if code, _, err = Instrument(bin); err != nil {
			tb.Fatal(err)
		}
	}
	c, err := r.CompileModule(ctx, code)
	if err != nil {
		tb.Fatal(err)
	}
	mod, err := r.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		tb.Fatal(err)
	}
	g := &goLoopRig{r: r, mod: mod, run: mod.ExportedFunction("run"), export: mod.ExportedFunction("loop_export"), ctx: ctx}
	if metered {
		if g.meter, err = NewMeter(mod); err != nil {
			tb.Fatal(err)
		}
		g.meter.Set(Unlimited)
		g.ctx = g.meter.Context(ctx)
	}
	if _, err := mod.ExportedFunction("_initialize").Call(g.ctx); err != nil {
		tb.Fatal(err)
	}
	return g
}

// threadCPU is the calling thread's CPU time (the goroutine must be locked
// to its thread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// call runs shape s for n iterations as a cpuMs-limited sandboxd call does
// when metered: a budget, a deadline on the context, and a poll that reads
// the thread's CPU clock at every refill. It returns the checksum, the
// thread CPU time of the call and the fuel it spent.
func (g *goLoopRig) call(tb testing.TB, s goLoopShape, n int64, budget int64) (int64, time.Duration, int64, error) {
	ctx := g.ctx
	if g.meter != nil {
		g.meter.Set(budget)
		cpuEnd := threadCPU() + time.Minute
		g.meter.SetPoll(func() bool { return threadCPU() > cpuEnd })
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	runtime.LockOSThread()
	start := threadCPU()
	var res []uint64
	var err error
	if s.shape < 0 {
		res, err = g.export.Call(ctx, uint64(n))
	} else {
		res, err = g.run.Call(ctx, uint64(s.shape), uint64(n))
	}
	cpu := threadCPU() - start
	runtime.UnlockOSThread()
	var spent int64
	if g.meter != nil {
		spent = budget - g.meter.Remaining()
		g.meter.SetPoll(nil)
	}
	if err != nil {
		return 0, cpu, spent, err
	}
	return int64(res[0]), cpu, spent, nil
}

// TestGoLoopShapes runs every shape of the corpus plain and metered: both
// compute the same checksum, the metered one spends at least one unit per
// iteration, and a budget far below that stops every shape with a fuel
// trap.
func TestGoLoopShapes(t *testing.T) {
	bin := readFile(t, goLoopsWasm)
	plain := newGoLoopRig(t, bin, false)
	metered := newGoLoopRig(t, bin, true)
	for _, s := range goLoopShapes {
		t.Run(strings.ReplaceAll(s.name, " ", "-"), func(t *testing.T) {
			n := s.n / 100
			want, _, _, err := plain.call(t, s, n, 0)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			got, _, spent, err := metered.call(t, s, n, Unlimited)
			if err != nil {
				t.Fatalf("metered: %v", err)
			}
			if got != want {
				t.Errorf("metered checksum %d, plain %d", got, want)
			}
			if spent < n {
				t.Errorf("spent %d fuel for %d iterations", spent, n)
			}
			_, _, _, err = metered.call(t, s, n, spent/10)
			if err == nil || !metered.meter.Exhausted() {
				t.Errorf("budget %d of %d: err %v, exhausted %v", spent/10, spent, err, metered.meter.Exhausted())
			}
			t.Logf("%s: %d iterations, %d fuel (%.1f/iteration)", s.name, n, spent, float64(spent)/float64(n))
		})
	}
}

// BenchmarkGoLoopShapes measures what metering costs on each loop shape of
// the corpus (testdata/wasm/go/goloops_reactor): the thread CPU time of a
// call on a metered instance (cpuMs-limited, as a sandboxd call runs) over
// that on a plain instance of the same module (uninstrumented, no
// interruption), medians of interleaved calls, and their geometric mean.
// Goal: every shape ≤ 1.3×, geometric mean ≤ 1.15×.
//
//	go test -run '^$' -bench GoLoopShapes -benchtime 5x ./internal/fuel
//
// It prints the table (shape, plain ms, metered ms, ratio, fuel per
// iteration) to stderr and reports the geometric mean as geomean-ratio.
func BenchmarkGoLoopShapes(b *testing.B) {
	bin := readFile(b, goLoopsWasm)
	plain := newGoLoopRig(b, bin, false)
	metered := newGoLoopRig(b, bin, true)
	type sample struct{ plain, metered []time.Duration }
	samples := make([]sample, len(goLoopShapes))
	spent := make([]int64, len(goLoopShapes))
	b.ResetTimer()
	for range b.N {
		for i, s := range goLoopShapes {
			for rep := 0; rep < 2; rep++ {
				want, p, _, err := plain.call(b, s, s.n, 0)
				if err != nil {
					b.Fatal(err)
				}
				got, m, f, err := metered.call(b, s, s.n, Unlimited)
				if err != nil || got != want {
					b.Fatalf("%s: metered %d %v, plain %d", s.name, got, err, want)
				}
				samples[i].plain = append(samples[i].plain, p)
				samples[i].metered = append(samples[i].metered, m)
				spent[i] = f
			}
		}
	}
	b.StopTimer()
	med := func(x []time.Duration) float64 {
		x = slices.Clone(x)
		slices.Sort(x)
		return float64(x[len(x)/2]) / 1e6
	}
	load, _ := os.ReadFile("/proc/loadavg")
	var w strings.Builder
	fmt.Fprintf(&w, "Go loop shapes, thread CPU time, medians of %d interleaved calls; load average %s\n", len(samples[0].plain), strings.TrimSpace(string(load)))
	fmt.Fprintf(&w, "| shape | plain ms | metered ms | metered / plain | fuel / iteration |\n|---|---:|---:|---:|---:|\n")
	logSum := 0.0
	worst := 0.0
	for i, s := range goLoopShapes {
		p, m := med(samples[i].plain), med(samples[i].metered)
		ratio := m / p
		logSum += math.Log(ratio)
		worst = max(worst, ratio)
		fmt.Fprintf(&w, "| %s | %.1f | %.1f | %.2f× | %.1f |\n", s.name, p, m, ratio, float64(spent[i])/float64(s.n))
		b.ReportMetric(ratio, strings.ReplaceAll(s.name, " ", "-")+"/plain")
	}
	geo := math.Exp(logSum / float64(len(goLoopShapes)))
	fmt.Fprintf(&w, "| **geometric mean** | | | **%.2f×** | |\n", geo)
	fmt.Fprintf(&w, "worst %.2f× (goal ≤ 1.3×), geometric mean %.2f× (goal ≤ 1.15×)\n", worst, geo)
	fmt.Fprint(os.Stderr, w.String())
	b.ReportMetric(geo, "geomean-ratio")
	b.ReportMetric(worst, "worst-ratio")
}
