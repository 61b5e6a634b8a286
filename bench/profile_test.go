package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// BenchmarkServe is the serve-vs-floor row as a benchmark, for profiles of
// the server alone: the keep-alive load client is a child process (as in
// the suite), so -cpuprofile, -memprofile, -mutexprofile and -blockprofile
// and allocs/op cover the server's side of b.N calls (the timer runs only
// while the child measures). It reports the server process's CPU per call
// (cpu-us/op) and calls/s.
//
//	go test -run '^$' -bench 'Serve$' -benchtime 20000x -count 3 -cpuprofile cpu.out -memprofile mem.out .
func BenchmarkServe(b *testing.B) {
	serve, floor := startServe(b, b.TempDir()), startFloor(b)
	body := serveBody()
	for _, conc := range []int{1, 8} {
		for _, side := range []struct{ name, url string }{{"floor", floor}, {"serve", serve}} {
			b.Run(fmt.Sprintf("%s/c%d", side.name, conc), func(b *testing.B) {
				b.ReportAllocs()
				b.StopTimer()
				l := childLoad(b, side.url+"/v1/invoke", body, conc, 0, int64(b.N), b)
				b.ReportMetric(float64(l.cpu.Nanoseconds())/1e3/float64(l.calls), "cpu-us/op")
				b.ReportMetric(float64(l.calls)/l.elapsed.Seconds(), "calls/s")
			})
		}
	}
}

// BenchmarkScaling is the scaling row as a benchmark: each of b.N rounds
// runs the pure-CPU control and the 1 KiB validated echo (context-isolated
// and none, and the same echo as native Go) from 4 goroutines for 200 ms
// at GOMAXPROCS 1 and at 2; it reports each case's calls/s ratio 2/1
// (control-x, isolated-x, none-x, native-x).
// Use it with -mutexprofile and -blockprofile to see what serialises.
//
//	go test -run '^$' -bench 'Scaling$' -benchtime 4x -mutexprofile mu.out -blockprofile block.out .
func BenchmarkScaling(b *testing.B) {
	ctx := context.Background()
	cache := b.TempDir()
	in := payload(1 << 10)
	path := filepath.Join(root(b), "testdata/wasm/echo_reactor.wasm")
	iso := loadTool(b, newExecutor(b, cache, 8), toolManifest("bench.scale", fsRef(path), true, "context-isolated", 5000))
	none := loadTool(b, newExecutor(b, cache, 8), toolManifest("bench.scale", fsRef(path), true, "none", 5000))
	native := nativeScalingCase(b, path)
	cases := []callCase{
		{"control", scalingControl(in)},
		{"isolated", func() error { _, err := iso.Invoke(ctx, executor.Request{Input: in}); return err }},
		{"none", func() error { _, err := none.Invoke(ctx, executor.Request{Input: in}); return err }},
		{"native", func() error { _, err := native(in); return err }},
	}
	calls := make([][2]int64, len(cases))
	secs := make([][2]float64, len(cases))
	b.ReportAllocs()
	for round := 0; round < b.N; round++ {
		for pi, procs := range []int{1, 2} {
			prev := runtime.GOMAXPROCS(procs)
			for ci, c := range cases {
				n, el, err := hammer(c.fn, 4, 200*time.Millisecond)
				if err != nil {
					runtime.GOMAXPROCS(prev)
					b.Fatal(err)
				}
				calls[ci][pi] += n
				secs[ci][pi] += el.Seconds()
			}
			runtime.GOMAXPROCS(prev)
		}
	}
	for ci, c := range cases {
		r1, r2 := float64(calls[ci][0])/secs[ci][0], float64(calls[ci][1])/secs[ci][1]
		b.ReportMetric(r2/r1, c.name+"-x")
	}
}
