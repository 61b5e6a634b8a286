package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

func testAdmission(o Options) *admission {
	if o.PerTenantCPUWindow == 0 {
		o.PerTenantCPUWindow = DefaultCPUWindow
	}
	return newAdmission(o)
}

// enterAsync starts a call of tenant that waits for its slots; the channel
// gets its slot once granted.
func enterAsync(t *testing.T, a *admission, tenant string, tool *toolSlots) chan slot {
	t.Helper()
	ch := make(chan slot, 1)
	go func() {
		s, r, _, err := a.enter(context.Background(), time.Time{}, tenant, tool)
		if r != "" || err != nil {
			t.Errorf("%s: refused %q, err %v", tenant, r, err)
		}
		ch <- s
	}()
	return ch
}

func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, q, _ := a.stats(); q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d calls queued", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Freed slots go round robin across the tenants with waiting calls: with
// tenant A's five calls queued before B's two, B's calls take the second
// and fourth freed slots, not the sixth and seventh.
func TestAdmissionRoundRobin(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 1, QueueSize: 100, PerTenantConcurrency: 1, PerTenantQueue: 10})
	tool := &toolSlots{cap: 10}
	held, _, _, _ := a.enter(context.Background(), time.Time{}, "x", tool)
	type got struct {
		tenant string
		ch     chan slot
	}
	var waiting []got
	for i := range 5 {
		waiting = append(waiting, got{"A", enterAsync(t, a, "A", tool)})
		waitQueued(t, a, i+1)
	}
	for i := range 2 {
		waiting = append(waiting, got{"B", enterAsync(t, a, "B", tool)})
		waitQueued(t, a, 6+i)
	}
	var order string
	a.leave(held, 0)
	for range waiting {
		// exactly one call holds the slot: find it, record it, free it
		var s slot
		var who string
		for s.t == nil {
			for _, w := range waiting {
				select {
				case s = <-w.ch:
					who = w.tenant
				default:
				}
				if s.t != nil {
					break
				}
			}
		}
		order += who
		a.leave(s, 0)
	}
	if order != "ABABAAA" {
		t.Errorf("grant order %s, want ABABAAA", order)
	}
	if in, q, n := a.stats(); in != 0 || q != 0 || n != 0 {
		t.Errorf("left over: %d running, %d queued, %d tenants", in, q, n)
	}
}

// A tenant at its ceiling waits; its queue is bounded (tenant-queue-full)
// while another tenant still gets in; a call whose tool is at its cap lets
// the tenant's next call to another tool pass.
func TestAdmissionCeilings(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 4, QueueSize: 8, PerTenantConcurrency: 2, PerTenantQueue: 1})
	t1, t2 := &toolSlots{cap: 1}, &toolSlots{cap: 4}
	ctx := context.Background()
	s1, r, _, _ := a.enter(ctx, time.Time{}, "A", t1)
	if r != "" {
		t.Fatal(r)
	}
	// t1 at its cap: A's second t1 call waits, its t2 call passes.
	c := enterAsync(t, a, "A", t1)
	waitQueued(t, a, 1)
	s2, r, _, _ := a.enter(ctx, time.Time{}, "A", t2)
	if r != "" {
		t.Fatalf("a call to a free tool: %s", r)
	}
	// A at its ceiling (2) with one call queued: the next is refused.
	if _, r, _, _ := a.enter(ctx, time.Time{}, "A", t2); r != RefusedTenantQueue {
		t.Fatalf("over A's queue: %q", r)
	}
	// B is not affected.
	s3, r, _, _ := a.enter(ctx, time.Time{}, "B", t2)
	if r != "" {
		t.Fatalf("B: %s", r)
	}
	a.leave(s2, 0) // t1 still at its cap: still queued
	if _, q, _ := a.stats(); q != 1 {
		t.Fatalf("A's queued call ran over its tool's cap")
	}
	a.leave(s1, 0)
	a.leave(<-c, 0)
	// B at its ceiling: its third call waits although a slot is free, and
	// runs when one of B's own ends.
	s4, _, _, _ := a.enter(ctx, time.Time{}, "B", t2)
	c = enterAsync(t, a, "B", t2)
	waitQueued(t, a, 1)
	if in, _, _ := a.stats(); in != 2 {
		t.Fatalf("B's third call ran over its ceiling: %d running", in)
	}
	a.leave(s3, 0)
	a.leave(<-c, 0)
	a.leave(s4, 0)
	if in, q, n := a.stats(); in != 0 || q != 0 || n != 0 {
		t.Errorf("left over: %d running, %d queued, %d tenants", in, q, n)
	}
}

// A queued call whose deadline passes leaves the queue with
// context.DeadlineExceeded at the deadline (its context still live), and
// leaves no trace.
func TestAdmissionDeadlineWhileQueued(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 1, QueueSize: 4, PerTenantConcurrency: 1, PerTenantQueue: 4})
	tool := &toolSlots{cap: 1}
	held, _, _, _ := a.enter(context.Background(), time.Time{}, "A", tool)
	deadline := time.Now().Add(20 * time.Millisecond)
	_, r, _, err := a.enter(context.Background(), deadline, "B", tool)
	if r != "" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refused %q, err %v; want context.DeadlineExceeded", r, err)
	}
	if time.Now().Before(deadline) {
		t.Fatal("left the queue before its deadline")
	}
	if _, q, n := a.stats(); q != 0 || n != 1 {
		t.Fatalf("after the deadline: %d queued, %d tenants", q, n)
	}
	a.leave(held, 0)
	if in, q, n := a.stats(); in != 0 || q != 0 || n != 0 {
		t.Errorf("left over: %d running, %d queued, %d tenants", in, q, n)
	}
}

// A call that gives up while queued leaves no trace.
func TestAdmissionCancelledWhileQueued(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 1, QueueSize: 4, PerTenantConcurrency: 1, PerTenantQueue: 4})
	tool := &toolSlots{cap: 1}
	held, _, _, _ := a.enter(context.Background(), time.Time{}, "A", tool)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, r, _, err := a.enter(ctx, time.Time{}, "B", tool); r != "" || err == nil {
		t.Fatalf("refused %q, err %v", r, err)
	}
	if _, q, n := a.stats(); q != 0 || n != 1 {
		t.Fatalf("after the cancel: %d queued, %d tenants", q, n)
	}
	a.leave(held, 0)
	if in, q, n := a.stats(); in != 0 || q != 0 || n != 0 {
		t.Errorf("left over: %d running, %d queued, %d tenants", in, q, n)
	}
}

// The CPU budget: a tenant over it is refused until its window ends, with
// the rest of the window as retry; another tenant is not.
func TestAdmissionCPUBudget(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 4, QueueSize: 4, PerTenantConcurrency: 4, PerTenantQueue: 4,
		PerTenantCPUBudget: 100 * time.Millisecond, PerTenantCPUWindow: 10 * time.Second})
	now := time.Unix(1_000_000_003, 0) // 3 s into a 10 s window
	a.now = func() time.Time { return now }
	tool := &toolSlots{cap: 4}
	ctx := context.Background()
	s, _, _, _ := a.enter(ctx, time.Time{}, "A", tool)
	a.leave(s, 60)
	s, r, _, _ := a.enter(ctx, time.Time{}, "A", tool)
	if r != "" {
		t.Fatalf("under the budget: %s", r)
	}
	a.leave(s, 60)
	_, r, retry, _ := a.enter(ctx, time.Time{}, "A", tool)
	if r != RefusedTenantCPU || retry != 7*time.Second {
		t.Fatalf("over the budget: %q retry %v, want tenant-cpu-budget 7s", r, retry)
	}
	if s, r, _, _ := a.enter(ctx, time.Time{}, "B", tool); r != "" {
		t.Fatalf("another tenant: %s", r)
	} else {
		a.leave(s, 0)
	}
	now = now.Add(7 * time.Second) // the next window
	if s, r, _, _ := a.enter(ctx, time.Time{}, "A", tool); r != "" {
		t.Fatalf("in the next window: %s", r)
	} else {
		a.leave(s, 0)
	}
}

// 10,000 distinct tenant ids, many waiting at once, leave the admission
// state's memory where it was: entries exist only for tenants with calls,
// and the CPU sketch has a fixed size.
func TestAdmissionStateBounded(t *testing.T) {
	a := testAdmission(Options{MaxConcurrency: 8, QueueSize: 32, PerTenantConcurrency: 4, PerTenantQueue: 8,
		PerTenantCPUBudget: time.Hour, PerTenantCPUWindow: time.Hour})
	tool := &toolSlots{cap: 8}
	run := func(n, from int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 48) // more callers than slots + queue: some queue, some are refused
		for i := range n {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				s, r, _, err := a.enter(context.Background(), time.Time{}, fmt.Sprintf("tenant-%08d-%s", from+i, "x"), tool)
				if r != "" || err != nil {
					return
				}
				time.Sleep(50 * time.Microsecond)
				a.leave(s, 1.5)
			}()
		}
		wg.Wait()
	}
	run(1000, 0) // warm: spare entries, map buckets
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(10_000, 1_000_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if in, q, n := a.stats(); in != 0 || q != 0 || n != 0 {
		t.Fatalf("left over: %d running, %d queued, %d tenants", in, q, n)
	}
	if len(a.free) > a.capacity+a.queueCap {
		t.Errorf("%d spare entries, over %d", len(a.free), a.capacity+a.queueCap)
	}
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap %d -> %d bytes after 10,000 tenant ids (%+d)", before.HeapAlloc, after.HeapAlloc, growth)
	// An entry per id kept would be ≥ 10,000 × 64 bytes.
	if growth > 64<<10 {
		t.Errorf("the heap grew by %d bytes over 10,000 tenant ids", growth)
	}
}
