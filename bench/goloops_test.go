package bench

import (
	"context"
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

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// goLoopShapeCases is testdata/wasm/go/goloops_reactor's corpus: the name,
// run's shape argument (-1: the loop_export export) and the iterations of
// a call (the same as internal/fuel's BenchmarkGoLoopShapes).
var goLoopShapeCases = []struct {
	name  string
	shape int32
	n     int64
}{
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

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// goLoopShapes measures sandboxd's fuel pass on every Go loop shape of the
// corpus: thread CPU time of a call on a metered instance, cpuMs-limited
// the way a sandboxd call is (a budget, a deadline, a poll of the thread's
// CPU clock at every refill), over that on a plain instance of the same
// module under plain wazero; medians of interleaved calls on one reused
// instance each; goal every shape ≤ 1.3× and the geometric mean ≤ 1.15×.
func goLoopShapes(t *testing.T, r *report) {
	ctx := context.Background()
	bin := readFile(t, root(t)+"/testdata/wasm/goloops_reactor.wasm")
	metered, _, err := fuel.Instrument(bin)
	if err != nil {
		t.Fatal(err)
	}
	type rig struct {
		run, export api.Function
		meter       *fuel.Meter
		ctx         context.Context
	}
	newRig := func(code []byte, meter bool) *rig {
		rtm := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
		t.Cleanup(func() { _ = rtm.Close(ctx) })
		wasi_snapshot_preview1.MustInstantiate(ctx, rtm)
		if _, err := fuel.HostModule(ctx, rtm); err != nil {
			t.Fatal(err)
		}
		mod, err := rtm.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		g := &rig{run: mod.ExportedFunction("run"), export: mod.ExportedFunction("loop_export"), ctx: ctx}
		if meter {
			if g.meter, err = fuel.NewMeter(mod); err != nil {
				t.Fatal(err)
			}
			g.meter.Set(fuel.Unlimited)
			g.ctx = g.meter.Context(ctx)
		}
		if _, err := mod.ExportedFunction("_initialize").Call(g.ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	call := func(g *rig, shape int32, n int64) (uint64, time.Duration) {
		cctx := g.ctx
		if g.meter != nil {
			g.meter.Set(fuel.Unlimited)
			end := threadCPU() + time.Minute
			g.meter.SetPoll(func() bool { return threadCPU() > end })
			defer g.meter.SetPoll(nil)
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(cctx, time.Minute)
			defer cancel()
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := threadCPU()
		var res []uint64
		var err error
		if shape < 0 {
			res, err = g.export.Call(cctx, uint64(n))
		} else {
			res, err = g.run.Call(cctx, uint64(shape), uint64(n))
		}
		if err != nil {
			t.Fatal(err)
		}
		return res[0], threadCPU() - start
	}
	plain, met := newRig(bin, false), newRig(metered, true)
	load, _ := os.ReadFile("/proc/loadavg")
	r.p("### Standard-Go loop shapes (goal: every shape ≤ 1.3×, geometric mean ≤ 1.15×)")
	r.p("")
	r.p("`testdata/wasm/go/goloops_reactor` (`GOOS=wasip1` reactor, one export `run(shape, n)`): %d loop shapes, each run on a plain instance under plain wazero and on an instance of the same module metered by sandboxd's fuel pass, cpuMs-limited as a sandboxd call is (fuel budget, deadline, CPU-clock poll at every refill); the figure is the calling thread's CPU time, median of 5 interleaved calls each. Load average at the start: %s. `go test -run '^$' -bench GoLoopShapes ./internal/fuel` measures the same.", len(goLoopShapeCases), strings.TrimSpace(string(load)))
	r.p("")
	r.p("| shape | plain ms | metered ms | metered / plain |")
	r.p("|---|---:|---:|---:|")
	logSum, worst := 0.0, 0.0
	for _, s := range goLoopShapeCases {
		var ps, ms []time.Duration
		for range 5 {
			want, p := call(plain, s.shape, s.n)
			got, m := call(met, s.shape, s.n)
			if got != want {
				t.Fatalf("%s: metered computed %d, plain %d", s.name, got, want)
			}
			ps, ms = append(ps, p), append(ms, m)
		}
		slices.Sort(ps)
		slices.Sort(ms)
		p, m := ps[len(ps)/2], ms[len(ms)/2]
		x := ratioOf(m, p)
		logSum += math.Log(x)
		worst = max(worst, x)
		r.p("| %s | %.1f | %.1f | %s |", s.name, float64(p)/1e6, float64(m)/1e6, fmtRatio(x))
	}
	geo := math.Exp(logSum / float64(len(goLoopShapeCases)))
	r.p("| **geometric mean** | | | **%s** |", fmtRatio(geo))
	r.p("")
	addGoal("Go loop shapes: worst shape, sandboxd's fuel pass / plain wazero (thread CPU)", fmtRatio(worst), "≤ 1.3×", worst <= 1.3)
	addGoal("Go loop shapes: geometric mean of 14, sandboxd's fuel pass / plain wazero (thread CPU)", fmtRatio(geo), "≤ 1.15×", geo <= 1.15)
}
