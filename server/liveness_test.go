package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// livenessBounds are issue 12 §1's bounds; under -race the Go side (HTTP,
// host functions) runs several times slower, guests' compiled code does
// not, so the Go-work bounds are loosened there.
func livenessBounds() (echoP99, gcPause, deadlineSlack time.Duration) {
	if raceEnabled {
		// Still far below F03's 38 s stop-the-world.
		return time.Second, 1500 * time.Millisecond, 500 * time.Millisecond
	}
	return 50 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond
}

// gcPauses returns the GC pause histogram (runtime/metrics).
func gcPauses() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/gc/pauses:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// maxPauseSince is the upper bound of the largest histogram bucket whose
// count grew since before (the bucket's lower bound when it is unbounded).
func maxPauseSince(before, after *metrics.Float64Histogram) (time.Duration, uint64) {
	var pauses uint64
	top := -1
	for i := range after.Counts {
		if d := after.Counts[i] - before.Counts[i]; d > 0 {
			pauses += d
			top = i
		}
	}
	if top < 0 {
		return 0, 0
	}
	hi := after.Buckets[top+1]
	if math.IsInf(hi, 1) {
		hi = after.Buckets[top]
	}
	return time.Duration(hi * float64(time.Second)), pauses
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

// Issue 12 §1, process liveness: the worst guests (a spin loop, a
// memory.fill loop at memMB, a random_get loop, a host-call loop) run in
// one serve process, one at a time, beside well-behaved echo calls, with
// the GC forced every 50 ms. Echo p99 stays under 50 ms, no GC pause exceeds 10 ms,
// every hostile call's deadline answer arrives within 100 ms of its
// deadline, and SIGTERM (here: Serve's context) drains within the drain
// bound while hostile guests are still running.
func TestServeLivenessHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hostile guests for several seconds")
	}
	const (
		hostileTimeout = 1000 * time.Millisecond
		runFor         = 8 * time.Second // two calls of each hostile kind
		drainTimeout   = 2 * time.Second
	)
	hostile := []server.StaticTool{
		tool(t, "h.spin", "loop", 16, 600_000, nil),
		tool(t, "h.fill", "live_fill", 64, 600_000, nil),
		tool(t, "h.random", "live_random", 16, 600_000, nil),
		tool(t, "h.hostcall", "live_hostcall", 16, 600_000, nil),
	}
	ts := start(t, server.StaticSource{Tools: append([]server.StaticTool{echoTool()}, hostile...)},
		server.Options{DrainTimeout: drainTimeout})
	for range 3 {
		wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"warm"}`)), "")
	}

	// The same traffic without hostile guests, for comparison: what the
	// machine gives now (not asserted).
	t.Logf("baseline, no hostile guest:")
	base := measureLiveness(t, ts, nil, 2*time.Second, hostileTimeout)
	_ = base.check(t, nil, 2*time.Second)

	// A shared machine can stall any process for a while: a run passes
	// when every bound holds; up to three runs are made. A guest that
	// freezes the process (F03: a 38 s stop-the-world) fails them all.
	var problems []string
	for attempt := 1; attempt <= 3; attempt++ {
		t.Logf("run %d:", attempt)
		problems = measureLiveness(t, ts, hostile, runFor, hostileTimeout).check(t, hostile, runFor)
		if len(problems) == 0 {
			break
		}
		for _, p := range problems {
			t.Logf("run %d: %s", attempt, p)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}

	// Drain with hostile guests running: start one of each with a long
	// deadline, then end Serve.
	var inflight sync.WaitGroup
	for _, h := range hostile {
		id := toolID(t, h)
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			_, _ = do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke",
				strings.NewReader(invokeBody(id, `{}`)), authJSON("kindgi-timeout-ms", "60000"))
		}()
	}
	eventually(t, "hostile calls running", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == fmt.Sprint(len(hostile)) })
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	ts.cancel()
	var drainTook time.Duration
	select {
	case err := <-ts.done:
		drainTook = time.Since(t0)
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return 30 s after its context ended")
	}
	ts.done <- nil                                    // for the cleanup
	drainBound := drainTimeout + 500*time.Millisecond // the drain, then stuck connections are closed at once
	inflight.Wait()

	t.Logf("drain with %d hostile guests running: Serve returned after %v (bound %v)", len(hostile), drainTook, drainBound)
	if drainTook > drainBound {
		t.Errorf("drain took %v > %v", drainTook, drainBound)
	}
}

// livenessRun is one measured run of TestServeLivenessHostile.
type livenessRun struct {
	echoLat  []time.Duration
	slack    map[string][]time.Duration
	failures []string
	maxPause time.Duration
	nPauses  uint64
	pauseBy  map[string]time.Duration // largest GC pause bucket while each kind ran
}

// measureLiveness runs the hostile guests one at a time for runFor beside
// two echo callers, with the GC forced every 50 ms.
func measureLiveness(t *testing.T, ts *testServer, hostile []server.StaticTool, runFor, hostileTimeout time.Duration) (r livenessRun) {
	r.pauseBy = map[string]time.Duration{}
	ctx, stop := context.WithTimeout(context.Background(), runFor)
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var echoLat []time.Duration
	slack := map[string][]time.Duration{}
	var failures []string
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	pausesBefore := gcPauses()
	// The GC's stop-the-world must reach every goroutine, guests included.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				runtime.GC()
			}
		}
	}()
	// One hostile call at a time, cycling through the kinds, so that a core
	// stays free for the echo traffic (as in F03's run1.sh): what is
	// measured is the guests' effect on the process (GC stop-the-world,
	// scheduling), not CPU starvation of a 2-core machine.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil && len(hostile) > 0; i++ {
			id := toolID(t, hostile[i%len(hostile)])
			p0 := gcPauses()
			t0 := time.Now()
			res, err := do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke",
				strings.NewReader(invokeBody(id, `{}`)), authJSON("kindgi-timeout-ms", fmt.Sprint(hostileTimeout.Milliseconds())))
			took := time.Since(t0)
			if err != nil {
				fail("%s: %v", id, err)
				return
			}
			if res.status != http.StatusOK {
				fail("%s: status %d %s", id, res.status, res.body)
				return
			}
			if m := res.msg(t); m["code"] != "deadline-exceeded" {
				// A guest stopped for another reason (cpuMs, memMB)
				// says nothing about deadline answers.
				fail("%s: answered %s, want deadline-exceeded", id, res.body)
				return
			}
			pause, _ := maxPauseSince(p0, gcPauses())
			mu.Lock()
			slack[id] = append(slack[id], took-hostileTimeout)
			r.pauseBy[id] = max(r.pauseBy[id], pause)
			mu.Unlock()
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				r, err := do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke",
					strings.NewReader(invokeBody("acme.echo", `{"message":"hi"}`)), authJSON())
				took := time.Since(t0)
				if err != nil || r.status != http.StatusOK || r.msg(t)["kind"] != "result" {
					fail("echo: %v %v", err, r)
					return
				}
				mu.Lock()
				echoLat = append(echoLat, took)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	r.maxPause, r.nPauses = maxPauseSince(pausesBefore, gcPauses())
	r.echoLat, r.slack, r.failures = echoLat, slack, failures
	return r

}

// check logs a run's figures and returns what broke a bound.
func (r livenessRun) check(t *testing.T, hostile []server.StaticTool, runFor time.Duration) (problems []string) {
	echoP99Max, gcPauseMax, slackMax := livenessBounds()
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	echoP99 := percentile(r.echoLat, 0.99)
	t.Logf("echo: %d calls, p50 %v, p99 %v, max %v (bound p99 < %v)", len(r.echoLat),
		percentile(r.echoLat, 0.5), echoP99, percentile(r.echoLat, 1), echoP99Max)
	t.Logf("GC: %d pauses during the run, largest bucket ≤ %v (bound %v)", r.nPauses, r.maxPause, gcPauseMax)
	for _, h := range hostile {
		id := toolID(t, h)
		s := r.slack[id]
		t.Logf("%s: %d deadline answers, after the deadline by p50 %v, max %v (bound %v); largest GC pause bucket while it ran ≤ %v",
			id, len(s), percentile(s, 0.5), percentile(s, 1), slackMax, r.pauseBy[id])
		if len(s) == 0 {
			bad("%s: no deadline answer", id)
		} else if m := percentile(s, 1); m > slackMax {
			bad("%s: a deadline answer came %v after the deadline (bound %v)", id, m, slackMax)
		}
	}
	problems = append(problems, r.failures...)
	if len(r.echoLat) < 20 {
		bad("only %d echo calls answered in %v", len(r.echoLat), runFor)
	}
	if echoP99 > echoP99Max {
		bad("echo p99 %v > %v", echoP99, echoP99Max)
	}
	if r.nPauses == 0 {
		bad("no GC ran during the run")
	} else if r.maxPause > gcPauseMax {
		bad("a GC pause reached the %v bucket (bound %v)", r.maxPause, gcPauseMax)
	}
	return problems
}

func toolID(t testing.TB, st server.StaticTool) string {
	var m struct{ ID string }
	if err := json.Unmarshal(st.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}
