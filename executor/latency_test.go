package executor_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/extism"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// latGuest is one of the worst guests for interrupt latency: each does as
// much uninterrupted work per fuel check as its kind allows.
type latGuest struct {
	name  string                 // in the table
	fx    string                 // fixture
	entry string                 // the modulePath #NAME (an Extism plug-in's export), or ""
	edit  func(m map[string]any) // more manifest edits, or nil
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
	// Extism kernel calls (G04): the host work of reset, load/store,
	// alloc/free and var copies grows with the bytes they touch.
	{name: "Extism reset of 900 MB loop (G04)", fx: "g04_extism_kernel", entry: "reset", memMB: 1024, input: `{}`},
	{name: "Extism reset of 48 MiB written loop", fx: "g04_extism_kernel", entry: "reset_dirty", memMB: 64, input: `{}`},
	{name: "Extism store_u64 over 48 MiB loop", fx: "g04_extism_kernel", entry: "store_loop", memMB: 64, input: `{}`},
	{name: "Extism load_u64 over 48 MiB loop", fx: "g04_extism_kernel", entry: "load_loop", memMB: 64, input: `{}`},
	{name: "Extism var_set/var_get 1 MiB loop", fx: "g04_extism_kernel", entry: "var_huge", memMB: 16, input: `{}`},
	{name: "Extism alloc/free churn", fx: "g04_extism_kernel", entry: "churn", memMB: 16, input: `{}`},
	// Not a loop: the guest returns at once, and the host's copy of its
	// 480 MiB output out of kernel memory is the call's work (budget 5:
	// the copy takes 40-300 ms here, but a fast machine's memmove may
	// finish it in under 20).
	{name: "Extism output copy of 480 MiB", fx: "g04_extism_kernel", entry: "output_big", memMB: 1024, input: `{}`, budget: 5},
}

// latLoad loads g's fixture with memMB and cpuMs (and its Extism entry).
func latLoad(t *testing.T, e *executor.Executor, g latGuest, cpuMs int) *executor.Tool {
	t.Helper()
	return load(t, e, g.fx, func(m map[string]any) {
		withLimits(g.memMB, cpuMs)(m)
		if g.entry != "" {
			ref := m["codeArtifactRef"].(map[string]any)
			ref["modulePath"] = ref["modulePath"].(string) + "#" + g.entry
		}
		if g.edit != nil {
			g.edit(m)
		}
	})
}

// stopSample is how long after its budget or deadline one call returned.
type stopSample struct {
	over time.Duration // past the budget or the deadline
	// late is, for a deadline, how late a plain goroutine waiting for the
	// same deadline woke up: the machine's own scheduling delay at that
	// moment, which no guest interrupt can beat (2 shared cores).
	late time.Duration
	code toolerr.Code
	msg  string
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
	s := stopSample{code: te.Code, msg: te.Message}
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
			t.Fatalf("%s: a call ended with %s (%s), want %s", g.name, s.code, s.msg, want)
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
// WASI: random_get, input_read, output_set, log, fd_write; Extism's kernel:
// reset, load/store, vars, alloc/free), the deepest call tree without a
// loop, and a spin loop.
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
		cpuTool := latLoad(t, e, g, budget)
		cpu := measureRobust(t, cpuTool, g, n, budget, 0, toolerr.LimitsExceeded)
		wallTool := latLoad(t, e, g, 600_000)
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
func f01Check(t *testing.T, g latGuest) { f01CheckWith(t, newExecutor(t), g) }

// f01CheckWith is f01Check on executor e.
func f01CheckWith(t *testing.T, e *executor.Executor, g latGuest) {
	t.Helper()
	n := 3
	if testing.Short() {
		n = 1 // each call burns its whole limit (0.2 s of CPU, 0.3 s wall): one of each under -short
	}
	cpuTool := latLoad(t, e, g, 200)
	cpu := measureRobust(t, cpuTool, g, n, 200, 0, toolerr.LimitsExceeded)
	wallTool := latLoad(t, e, g, 600_000)
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

// latGuestFor returns the latGuests row of fixture fx and entry.
func latGuestFor(fx, entry string) latGuest {
	return latGuests[slices.IndexFunc(latGuests, func(g latGuest) bool { return g.fx == fx && g.entry == entry })]
}

// G04: an Extism plug-in's kernel reset cleared every kernel page in one host
// call, charged afterwards with no interrupt inside: alloc(900 MB) once, then
// reset; alloc(900 MB) in a loop ran to 0.5-1.9 s against cpuMs 100 and was
// answered at 0.6-2.4 s with a 300 ms deadline. Reset now clears only the
// pages written since (none here, but a block header), a page at a time,
// each charged first; pages never written are never allocated. The stop is
// within stopBound of cpuMs 100 and of a 300 ms deadline, and the process
// does not grow by the 900 MB the old reset faulted in.
func TestG04ExtismReset(t *testing.T) {
	g := latGuestFor("g04_extism_kernel", "reset")
	n := 3
	if testing.Short() {
		n = 1
	}
	e := newExecutor(t)
	rss0 := residentBytes(t)
	cpuTool := latLoad(t, e, g, 100)
	cpu := measureRobust(t, cpuTool, g, n, 100, 0, toolerr.LimitsExceeded)
	wallTool := latLoad(t, e, g, 600_000)
	wall := measureRobust(t, wallTool, g, n, 0, 300*time.Millisecond, toolerr.DeadlineExceeded)
	grew := residentBytes(t) - rss0
	t.Logf("%s: past cpuMs 100: %v; past a 300 ms deadline: %v; resident memory grew %d MiB", g.name, cpu, wall, grew>>20)
	if cpu.excess99 > stopBound*time.Millisecond || wall.excess99 > stopBound*time.Millisecond {
		t.Errorf("%s: want every stop within %d ms of the limit", g.name, stopBound)
	}
	if grew > 256<<20 {
		t.Errorf("resident memory grew by %d MiB: kernel pages never written were touched", grew>>20)
	}
}

// The other Extism kernel calls whose work grows with the bytes they touch,
// each in a loop, stop within stopBound of cpuMs 200 and of a 300 ms
// deadline (F01's shape): a reset of 48 MiB of written pages, store_u64
// and load_u64 across a 48 MiB block, a var as large as the store set and
// read back, and alloc/free churn over a full kernel's freed blocks.
func TestG04ExtismKernelCalls(t *testing.T) {
	for _, entry := range []string{"reset_dirty", "store_loop", "load_loop", "var_huge", "churn"} {
		t.Run(entry, func(t *testing.T) { f01Check(t, latGuestFor("g04_extism_kernel", entry)) })
	}
}

// The copy of an Extism plug-in's output out of kernel memory, after the
// guest returned, ran outside the call's guard with the kernel's meter on
// context.Background(): a 480 MiB output (memMB 1024) was copied in full
// whatever the deadline or cpuMs, and usage.cpuMs left it out (0.09-0.27
// ms for calls of 57-348 ms). It now runs in the guard under the call's
// context, charged 64 KiB at a time: the call stops within stopBound of
// cpuMs 5 (limits-exceeded cpuMs) and of a 5 ms deadline
// (deadline-exceeded), a fuel budget below the copy's bytes fuel ends it
// (limits-exceeded fuel), and a call that copies the whole output reports
// the copy in usage.cpuMs: at least a third of the thread CPU time of the same
// copy made here (the output is zeros, which output validation refuses at
// its first byte, so the copy is what the call costs).
func TestExtismOutputCopyBounded(t *testing.T) {
	g := latGuestFor("g04_extism_kernel", "output_big")
	n := 3
	if testing.Short() {
		n = 1
	}
	e := newExecutor(t)
	cpuTool := latLoad(t, e, g, g.budget)
	cpu := measureRobust(t, cpuTool, g, n, g.budget, 0, toolerr.LimitsExceeded)
	wallTool := latLoad(t, e, g, 600_000)
	wall := measureRobust(t, wallTool, g, n, 0, time.Duration(g.budget)*time.Millisecond, toolerr.DeadlineExceeded)
	t.Logf("%s: past cpuMs %d: %v; past a %d ms deadline: %v", g.name, g.budget, cpu, g.budget, wall)
	if cpu.excess99 > stopBound*time.Millisecond || wall.excess99 > stopBound*time.Millisecond {
		t.Errorf("%s: want every stop within %d ms of the limit", g.name, stopBound)
	}

	// With a string output schema the copy is followed by a pass telling
	// JSON from text and two quoting it (zeros: \u0000 each, which then
	// does not fit in memMB): a limit of 200 ms lands in those passes,
	// which stop within stopBound of it too (json.Valid and the quoting
	// were one step each: 1-2 s for 480 MiB here).
	gs := g
	gs.edit = func(m map[string]any) { m["output"] = map[string]any{"type": "string"} }
	cpuS := measureRobust(t, latLoad(t, e, gs, 200), gs, n, 200, 0, toolerr.LimitsExceeded)
	wallS := measureRobust(t, latLoad(t, e, gs, 600_000), gs, n, 0, 200*time.Millisecond, toolerr.DeadlineExceeded)
	t.Logf("%s, string output: past cpuMs 200: %v; past a 200 ms deadline: %v", g.name, cpuS, wallS)
	if cpuS.excess99 > stopBound*time.Millisecond || wallS.excess99 > stopBound*time.Millisecond {
		t.Errorf("%s, string output: want every stop within %d ms of the limit", g.name, stopBound)
	}

	// The copy pays bytes fuel: a fuel budget below it ends the call
	// there (limits-exceeded fuel, the copy's charge in usage.fuel).
	fuelTool := latLoad(t, newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(4_000_000) }), g, 600_000)
	res, err := fuelTool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)})
	if te := wantCode(t, err, toolerr.LimitsExceeded); te.Details["limit"] != "fuel" || res == nil || res.Usage.Fuel < 4_000_000 {
		t.Fatalf("fuel budget 4,000,000: %s %v %+v", te.Message, te.Details, res)
	}

	// What a copy costs depends most on whether its buffer's pages are
	// faulted in anew or reused from the heap (5x here): the call and the
	// reference copy alternate, each after a collection that frees the
	// last one's buffer, and the cheapest of each are compared.
	const size = 0x1e000000 // output_big's
	ref, used := time.Duration(math.MaxInt64), math.MaxFloat64
	for range 3 {
		runtime.GC()
		res, err := wallTool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)})
		te := wantCode(t, err, toolerr.OutputValidationFailed) // zeros are not JSON
		if res == nil {
			t.Fatalf("no usage with %s", te.Message)
		}
		used = min(used, res.Usage.CPUMs)
		runtime.GC()
		ref = min(ref, kernelCopyCPU(size))
	}
	refMs := float64(ref) / float64(time.Millisecond)
	t.Logf("a whole copy of %d MiB: usage.cpuMs %.1f; the same copy out of a kernel here: %.1f ms of thread CPU", size>>20, used, refMs)
	if used < refMs/3 {
		t.Errorf("usage.cpuMs %.1f of a call that copied a %d MiB output, whose copy alone takes %.1f ms: the copy is not charged", used, size>>20, refMs)
	}
}

// kernelCopyCPU is the thread CPU time of reading n bytes (never written)
// out of an Extism kernel.
func kernelCopyCPU(n uint64) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	k := extism.New(limits.NewAccount(2*int64(n)), nil)
	if !k.Grow(n) {
		panic("kernelCopyCPU: the kernel does not grow")
	}
	clock := limits.CurrentThread()
	start := clock.Now()
	out := k.Read(0, n)
	took := clock.Now() - start
	runtime.KeepAlive(out)
	return took
}

// residentBytes is the process's resident set (VmRSS), or 0 where /proc
// has none (the growth check then passes trivially).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// An Extism plug-in's HTTP body copies are chunked and charged like every
// other kernel copy: a loop of http_request with a 16 MiB request body to a
// loopback upstream that answers 8 MiB (the egress budgets raised so that
// only the limits end the call) stops within stopBound of cpuMs 200 and of
// a 300 ms deadline.
func TestG04ExtismHTTPBody(t *testing.T) {
	answer := bytes.Repeat([]byte("x"), 8<<20)
	var full atomic.Int64 // requests whose whole 16 MiB body arrived
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, _ := io.Copy(io.Discard, r.Body); n == 16<<20 {
			full.Add(1)
		}
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	req, _ := json.Marshal(`{"url":"http://api.test:` + port + `/","method":"POST"}`)
	g := latGuest{name: "Extism http_request 16 MiB body loop", fx: "g04_extism_kernel", entry: "http_body", memMB: 128, input: string(req),
		edit: func(m map[string]any) {
			m["input"] = map[string]any{"type": "string"}
			withNetwork("allowlist", "api.test:"+port)(m)
		}}
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithEgressLimits(egress.Limits{MaxRequests: 1 << 30, MaxBodyBytes: 1 << 50})
	})
	f01CheckWith(t, e, g)
	t.Logf("%d whole request bodies reached the upstream", full.Load())
	if full.Load() == 0 {
		t.Error("no request body of 16 MiB reached the upstream")
	}
}
