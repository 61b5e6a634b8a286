package executor_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// latGuest is one of the worst guests for interrupt latency: each does as
// much uninterrupted work per fuel check as its kind allows.
type latGuest struct {
	name  string // in the table
	fx    string // fixture
	memMB int
	input string
	bulk  bool // a bulk memory operation (the pass charges it, not a host function)
	// budget is the cpuMs budget and the deadline in ms (0: 20). The 60 MiB
	// guests get 100: setting up a fresh 60 MiB instance (the pool's, or
	// the call's own when the pool is empty) takes tens of ms on a busy
	// machine, and a deadline that passes before the guest starts
	// measures that, not the interrupt.
	budget int
}

// bigInput is 256 KiB of input for the input_read guest (validating more
// can take longer than the test's deadline, before the guest starts).
var bigInput = `{"s":"` + strings.Repeat("a", 256<<10) + `"}`

var latGuests = []latGuest{
	{name: "spin loop", fx: "loop", memMB: 16, input: `{}`},
	{name: "call tree 2^28, no loop", fx: "lat_calltree", memMB: 16, input: `{}`},
	{name: "memory.fill 60 MiB loop", fx: "lat_fill", memMB: 64, input: `{}`, bulk: true, budget: 100},
	{name: "memory.copy 30 MiB loop", fx: "lat_copy", memMB: 64, input: `{}`, bulk: true, budget: 100},
	{name: "random_get 4 MiB loop", fx: "lat_random_big", memMB: 16, input: `{}`},
	{name: "random_get 256 KiB loop", fx: "lat_random_small", memMB: 16, input: `{}`},
	{name: "input_read 256 KiB loop", fx: "lat_input_read", memMB: 64, input: bigInput},
	{name: "output_set 16 MiB loop", fx: "lat_output_set", memMB: 64, input: `{}`},
	{name: "log 64 KiB loop", fx: "lat_log", memMB: 16, input: `{}`},
	{name: "fd_write 1 MiB loop", fx: "lat_fd_write", memMB: 16, input: `{}`},
}

// stopSample is how long after its budget or deadline one call returned.
type stopSample struct {
	over time.Duration // past the budget or the deadline
	// late is, for a deadline, how late a plain goroutine waiting for the
	// same deadline woke up: the machine's own scheduling delay at that
	// moment, which no guest interrupt can beat (2 shared cores).
	late time.Duration
	code toolerr.Code
}

// stopAfter runs one call of tool and reports how far past its limit it
// stopped: with cpuMs set (deadline 0) the CPU time used beyond cpuMs (the
// guest's thread clock: time the thread spent descheduled on a busy machine
// does not count, as it does not count against cpuMs); with a deadline the
// wall time from the deadline to the call's return.
func stopAfter(t *testing.T, tool *executor.Tool, input string, cpuMs int, deadline time.Duration) stopSample {
	t.Helper()
	timeout := deadline
	if timeout == 0 {
		timeout = 20 * time.Second // a backstop: the CPU budget must end the call
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(timeout))
	defer cancel()
	woke := make(chan time.Duration, 1)
	go func() {
		<-ctx.Done()
		woke <- time.Since(start) - timeout
	}()
	res, err := tool.Invoke(ctx, executor.Request{Input: []byte(input)})
	returned := time.Since(start)
	cancel()
	late := <-woke
	var te *toolerr.Error
	if !errors.As(err, &te) {
		t.Fatalf("%s: the call did not fail with a native error: %v", tool.ID(), err)
	}
	s := stopSample{code: te.Code}
	if deadline > 0 {
		s.over, s.late = returned-deadline, max(late, 0)
	} else if res != nil {
		s.over = time.Duration((res.Usage.CPUMs - float64(cpuMs)) * float64(time.Millisecond))
	}
	return s
}

// stopStats summarises the stops of repeated calls. For deadlines, excess
// is each stop less the scheduling delay measured at the same deadline
// (stopSample.late); for CPU budgets it is the stop itself.
type stopStats struct {
	p50, p99, max time.Duration
	excess99      time.Duration
	late99        time.Duration
}

func (s stopStats) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("%s / %s / %s ms | %s ms | %s ms", ms(s.p50), ms(s.p99), ms(s.max), ms(s.late99), ms(s.excess99))
}

// quantile is the nearest-rank q-quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// measureStops runs n calls and returns the stop statistics; every call must
// end with want (limits-exceeded for a CPU budget, deadline-exceeded for a
// deadline).
func measureStops(t *testing.T, tool *executor.Tool, g latGuest, n int, cpuMs int, deadline time.Duration, want toolerr.Code) stopStats {
	t.Helper()
	overs := make([]time.Duration, 0, n)
	excess := make([]time.Duration, 0, n)
	lates := make([]time.Duration, 0, n)
	for range n {
		if deadline > 0 {
			// Let the pool put a fresh instance back: a call that finds
			// it empty instantiates on its own path, before its guest
			// runs, and that is not what this measures.
			time.Sleep(poolPause)
		}
		s := stopAfter(t, tool, g.input, cpuMs, deadline)
		if s.code != want {
			t.Fatalf("%s: a call ended with %s, want %s", g.name, s.code, want)
		}
		overs = append(overs, max(s.over, 0))
		excess = append(excess, max(s.over-s.late, 0))
		lates = append(lates, s.late)
	}
	slices.Sort(overs)
	slices.Sort(excess)
	slices.Sort(lates)
	return stopStats{p50: quantile(overs, 0.5), p99: quantile(overs, 0.99), max: overs[len(overs)-1],
		excess99: quantile(excess, 0.99), late99: quantile(lates, 0.99)}
}

// measureRobust measures up to three rounds, until one has its p99 within
// the bound (the machine is shared: a burst of other work should not fail
// the test, a real latency problem — F01's were seconds — fails every
// round). It returns the best round and logs the others.
func measureRobust(t *testing.T, tool *executor.Tool, g latGuest, n int, cpuMs int, deadline time.Duration, want toolerr.Code) stopStats {
	t.Helper()
	best := measureStops(t, tool, g, n, cpuMs, deadline, want)
	for round := 2; round <= 3 && best.excess99 > stopBound*time.Millisecond; round++ {
		again := measureStops(t, tool, g, n, cpuMs, deadline, want)
		t.Logf("%s: round %d over the bound (%v); round %d: %v", g.name, round-1, best, round, again)
		if again.excess99 < best.excess99 {
			best = again
		}
	}
	return best
}

// Every worst guest stops within stopBound (p99) of its cpuMs budget and,
// separately, of its wall deadline: bulk memory operations of the largest
// size memMB allows (F01), host-call loops of every kind (sandboxd_v1 and
// WASI: random_get, input_read, output_set, log, fd_write), the deepest call
// tree without a loop, and a spin loop.
func TestInterruptLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs every hostile loop guest 20+ times against cpuMs and a deadline (about a minute)")
	}
	n := 40 // the p99 of 40 calls is their maximum
	if raceEnabled {
		n = 20
	}
	e := newExecutor(t)
	var table []string
	for _, g := range latGuests {
		budget := cmp.Or(g.budget, 20)
		cpuTool := load(t, e, g.fx, withLimits(g.memMB, budget))
		cpu := measureRobust(t, cpuTool, g, n, budget, 0, toolerr.LimitsExceeded)
		wallTool := load(t, e, g.fx, withLimits(g.memMB, 600_000))
		wall := measureRobust(t, wallTool, g, n, 0, time.Duration(budget)*time.Millisecond, toolerr.DeadlineExceeded)
		table = append(table,
			fmt.Sprintf("| %s | cpuMs %d | %v |", g.name, budget, cpu),
			fmt.Sprintf("| %s | deadline %d ms | %v |", g.name, budget, wall))
		if cpu.excess99 > stopBound*time.Millisecond {
			t.Errorf("%s: stopped past its cpuMs budget by %v; want p99 <= %d ms", g.name, cpu, stopBound)
		}
		if wall.excess99 > stopBound*time.Millisecond {
			t.Errorf("%s: stopped past its deadline by %v; want p99 (less scheduling delay) <= %d ms", g.name, wall, stopBound)
		}
	}
	t.Logf("interrupt latency, %d calls per row (race=%v, bound %d ms); a CPU stop is the CPU time used past cpuMs, "+
		"a deadline stop the wall time from the deadline to the call's return, less (asserted column) the scheduling delay "+
		"of a goroutine woken by the same deadline:\n"+
		"| guest | limit | stop p50 / p99 / max | sched. delay p99 | stop − delay p99 (asserted) |\n|---|---|---|---|---|\n%s",
		n, raceEnabled, stopBound, strings.Join(table, "\n"))
}

// f01Check runs F01's shape (cpuMs 200, a 2 s deadline; then the deadline
// alone) for one guest and asserts both stop within stopBound.
func f01Check(t *testing.T, g latGuest) {
	t.Helper()
	n := 3
	if testing.Short() {
		n = 1 // each call burns its whole limit (0.2 s of CPU, 0.3 s wall): one of each under -short
	}
	e := newExecutor(t)
	cpuTool := load(t, e, g.fx, withLimits(g.memMB, 200))
	cpu := measureRobust(t, cpuTool, g, n, 200, 0, toolerr.LimitsExceeded)
	wallTool := load(t, e, g.fx, withLimits(g.memMB, 600_000))
	wall := measureRobust(t, wallTool, g, n, 0, 300*time.Millisecond, toolerr.DeadlineExceeded)
	t.Logf("%s: past cpuMs 200: %v; past a 300 ms deadline: %v", g.name, cpu, wall)
	if cpu.excess99 > stopBound*time.Millisecond || wall.excess99 > stopBound*time.Millisecond {
		t.Errorf("%s: want every stop within %d ms of the limit", g.name, stopBound)
	}
}

// F01: a memory.fill of 60 MiB per loop iteration ran 316 s against cpuMs
// 200 and a 2 s deadline (one fuel unit per fill, a check per 2^20 units).
func TestF01FillLoop(t *testing.T) {
	f01Check(t, latGuests[slices.IndexFunc(latGuests, func(g latGuest) bool { return g.fx == "lat_fill" })])
	f01Check(t, latGuests[slices.IndexFunc(latGuests, func(g latGuest) bool { return g.fx == "lat_copy" })])
}

// F01: random_get of 4 MiB (and of 256 KiB) in a loop was still running at
// 300 s against cpuMs 200: each call cost one fuel unit and checked nothing.
func TestF01RandomGet(t *testing.T) {
	f01Check(t, latGuests[slices.IndexFunc(latGuests, func(g latGuest) bool { return g.fx == "lat_random_big" })])
	f01Check(t, latGuests[slices.IndexFunc(latGuests, func(g latGuest) bool { return g.fx == "lat_random_small" })])
}
