package bench

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/fueltest"
)

// goLoopShapes measures sandboxd's fuel pass on every Go loop shape of the
// corpus: thread CPU time of a call on a metered instance, cpuMs-limited
// the way a sandboxd call is (a budget, a deadline, a poll of the thread's
// CPU clock at every refill), over that on a plain instance of the same
// module under plain wazero; medians of interleaved calls on one reused
// instance each; goal every shape ≤ 1.3× and the geometric mean ≤ 1.15×.
func goLoopShapes(t *testing.T, r *report) {
	bin := readFile(t, root(t)+"/testdata/wasm/goloops_reactor.wasm")
	// The corpus, its instances and their timed calls are internal/fuel's
	// BenchmarkGoLoopShapes' too (internal/sandboxtest/fueltest).
	plain, met := fueltest.NewRig(t, bin, false), fueltest.NewRig(t, bin, true)
	call := func(g *fueltest.Rig, s fueltest.Shape) (int64, time.Duration) {
		sum, cpu, _, err := g.Call(s, s.N, fuel.Unlimited)
		if err != nil {
			t.Fatal(err)
		}
		return sum, cpu
	}
	load, _ := os.ReadFile("/proc/loadavg")
	r.p("### Standard-Go loop shapes (goal: every shape ≤ 1.3×, geometric mean ≤ 1.15×)")
	r.p("")
	r.p("`testdata/wasm/go/goloops_reactor` (`GOOS=wasip1` reactor, one export `run(shape, n)`): %d loop shapes, each run on a plain instance under plain wazero and on an instance of the same module metered by sandboxd's fuel pass, cpuMs-limited as a sandboxd call is (fuel budget, deadline, CPU-clock poll at every refill); the figure is the calling thread's CPU time, median of 5 interleaved calls each. Load average at the start: %s. `go test -run '^$' -bench GoLoopShapes ./internal/fuel` measures the same.", len(fueltest.Shapes), strings.TrimSpace(string(load)))
	r.p("")
	r.p("| shape | plain ms | metered ms | metered / plain |")
	r.p("|---|---:|---:|---:|")
	logSum, worst := 0.0, 0.0
	for _, s := range fueltest.Shapes {
		var ps, ms []time.Duration
		for range 5 {
			want, p := call(plain, s)
			got, m := call(met, s)
			if got != want {
				t.Fatalf("%s: metered computed %d, plain %d", s.Name, got, want)
			}
			ps, ms = append(ps, p), append(ms, m)
		}
		slices.Sort(ps)
		slices.Sort(ms)
		p, m := ps[len(ps)/2], ms[len(ms)/2]
		x := ratioOf(m, p)
		logSum += math.Log(x)
		worst = max(worst, x)
		r.p("| %s | %.1f | %.1f | %s |", s.Name, float64(p)/1e6, float64(m)/1e6, fmtRatio(x))
	}
	geo := math.Exp(logSum / float64(len(fueltest.Shapes)))
	r.p("| **geometric mean** | | | **%s** |", fmtRatio(geo))
	r.p("")
	addGoal("Go loop shapes: worst shape, sandboxd's fuel pass / plain wazero (thread CPU)", fmtRatio(worst), "≤ 1.3×", worst <= 1.3)
	addGoal("Go loop shapes: geometric mean of 14, sandboxd's fuel pass / plain wazero (thread CPU)", fmtRatio(geo), "≤ 1.15×", geo <= 1.15)
}
