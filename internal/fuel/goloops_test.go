package fuel_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/fueltest"
)

// The corpus (testdata/wasm/go/goloops_reactor), its instances and their
// timed calls are internal/sandboxtest/fueltest's, which bench/ uses too.

// TestGoLoopShapes runs every shape of the corpus plain and metered: both
// compute the same checksum, the metered one spends at least one unit per
// iteration and at most 1000, and a budget far below that stops every shape with a fuel
// trap.
func TestGoLoopShapes(t *testing.T) {
	bin := fueltest.Wasm(t)
	plain := fueltest.NewRig(t, bin, false)
	metered := fueltest.NewRig(t, bin, true)
	for _, s := range fueltest.Shapes {
		t.Run(strings.ReplaceAll(s.Name, " ", "-"), func(t *testing.T) {
			n := s.N / 100
			want, _, _, err := plain.Call(s, n, 0)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			got, _, spent, err := metered.Call(s, n, fuel.Unlimited)
			if err != nil {
				t.Fatalf("metered: %v", err)
			}
			if got != want {
				t.Errorf("metered checksum %d, plain %d", got, want)
			}
			if spent < n {
				t.Errorf("spent %d fuel for %d iterations", spent, n)
			}
			// Charged per segment, no shape costs more than a few
			// hundred units per iteration (charged per level, as before
			// pass version 9, a map iteration cost 29,000 per element).
			if spent > 1000*n {
				t.Errorf("spent %d fuel for %d iterations (%.0f each)", spent, n, float64(spent)/float64(n))
			}
			_, _, _, err = metered.Call(s, n, spent/10)
			if err == nil || !metered.Meter.Exhausted() {
				t.Errorf("budget %d of %d: err %v, exhausted %v", spent/10, spent, err, metered.Meter.Exhausted())
			}
			t.Logf("%s: %d iterations, %d fuel (%.1f/iteration)", s.Name, n, spent, float64(spent)/float64(n))
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
	bin := fueltest.Wasm(b)
	plain := fueltest.NewRig(b, bin, false)
	metered := fueltest.NewRig(b, bin, true)
	type sample struct{ plain, metered []time.Duration }
	samples := make([]sample, len(fueltest.Shapes))
	spent := make([]int64, len(fueltest.Shapes))
	b.ResetTimer()
	for range b.N {
		for i, s := range fueltest.Shapes {
			for rep := 0; rep < 2; rep++ {
				want, p, _, err := plain.Call(s, s.N, 0)
				if err != nil {
					b.Fatal(err)
				}
				got, m, f, err := metered.Call(s, s.N, fuel.Unlimited)
				if err != nil || got != want {
					b.Fatalf("%s: metered %d %v, plain %d", s.Name, got, err, want)
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
	for i, s := range fueltest.Shapes {
		p, m := med(samples[i].plain), med(samples[i].metered)
		ratio := m / p
		logSum += math.Log(ratio)
		worst = max(worst, ratio)
		fmt.Fprintf(&w, "| %s | %.1f | %.1f | %.2f× | %.1f |\n", s.Name, p, m, ratio, float64(spent[i])/float64(s.N))
		b.ReportMetric(ratio, strings.ReplaceAll(s.Name, " ", "-")+"/plain")
	}
	geo := math.Exp(logSum / float64(len(fueltest.Shapes)))
	fmt.Fprintf(&w, "| **geometric mean** | | | **%.2f×** | |\n", geo)
	fmt.Fprintf(&w, "worst %.2f× (goal ≤ 1.3×), geometric mean %.2f× (goal ≤ 1.15×)\n", worst, geo)
	fmt.Fprint(os.Stderr, w.String())
	b.ReportMetric(geo, "geomean-ratio")
	b.ReportMetric(worst, "worst-ratio")
}
