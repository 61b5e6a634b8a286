package executor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// enterCall enters a fresh gate (as Tool.invoke does) under parent.
func enterCall(t *testing.T, parent context.Context, timeout time.Duration) (*callGate, *callCtx) {
	t.Helper()
	g := &callGate{}
	c, ok := g.enter(parent, timeout, time.Time{})
	if !ok {
		t.Fatal("enter refused on an open gate")
	}
	return g, c
}

// waitDone fails t unless ch closes within 5 s.
func waitDone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not done after 5 s", what)
	}
}

// A call's context ends for each of the four reasons the chain it replaced
// ended for, with the same Err and cause, whether or not anyone waits on
// Done: seen at Err without Done, and signalled to a waiter.
func TestCallCtxEnds(t *testing.T) {
	errMine := errors.New("caller's cause")
	cases := []struct {
		name      string
		end       func(parent context.CancelCauseFunc, g *callGate, c *callCtx)
		timeout   time.Duration
		err       error
		cause     error
		waitClock bool // ends by itself (the default timeout)
	}{
		{"caller cancels", func(p context.CancelCauseFunc, _ *callGate, _ *callCtx) { p(errMine) }, 0, context.Canceled, errMine, false},
		{"tool closes", func(_ context.CancelCauseFunc, g *callGate, _ *callCtx) { g.shut() }, 0, context.Canceled, errToolClosing, false},
		{"default timeout", func(context.CancelCauseFunc, *callGate, *callCtx) {}, 30 * time.Millisecond, context.DeadlineExceeded, context.DeadlineExceeded, true},
		{"watchdog", func(_ context.CancelCauseFunc, _ *callGate, c *callCtx) { c.CPUExceeded(time.Second) }, 0, context.Canceled, errCPUExceeded, false},
		{"handler cancel", func(_ context.CancelCauseFunc, _ *callGate, c *callCtx) { c.cancelCause(errOutputCap) }, 0, context.Canceled, errOutputCap, false},
	}
	for _, tc := range cases {
		for _, waiter := range []bool{false, true} {
			name := tc.name + "/polled"
			if waiter {
				name = tc.name + "/waited"
			}
			t.Run(name, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				g, c := enterCall(t, parent, tc.timeout)
				if err := c.Err(); err != nil {
					t.Fatalf("Err before the end: %v", err)
				}
				var done <-chan struct{}
				if waiter {
					done = c.Done()
				}
				tc.end(cancel, g, c)
				if waiter {
					waitDone(t, done, "Done")
				} else if tc.waitClock {
					time.Sleep(40 * time.Millisecond)
				}
				if err := c.Err(); err != tc.err {
					t.Fatalf("Err = %v, want %v", err, tc.err)
				}
				if cause := c.causeErr(); cause != tc.cause {
					t.Fatalf("cause = %v, want %v", cause, tc.cause)
				}
				waitDone(t, c.Done(), "Done after the end")
				c.release()
				if n := g.running.Load(); n != 0 {
					t.Fatalf("%d calls still counted after release", n)
				}
			})
		}
	}
}

// The deadline is the caller's when it has one (no default timeout then),
// else the default timeout's, else none.
func TestCallCtxDeadline(t *testing.T) {
	d := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.Background(), d)
	defer cancel()
	_, c := enterCall(t, parent, time.Millisecond)
	if got, ok := c.Deadline(); !ok || !got.Equal(d) || c.own {
		t.Fatalf("Deadline() = %v, %v (own %v), want the caller's %v", got, ok, c.own, d)
	}
	c.release()
	_, c = enterCall(t, context.Background(), time.Minute)
	if got, ok := c.Deadline(); !ok || time.Until(got) > time.Minute || time.Until(got) < 50*time.Second {
		t.Fatalf("Deadline() = %v, %v, want about a minute from now", got, ok)
	}
	c.release()
	_, c = enterCall(t, context.Background(), 0)
	if _, ok := c.Deadline(); ok {
		t.Fatal("a deadline without a timeout")
	}
	c.release()
}

// Contexts derived from a call's (what a host function's HTTP request or
// egress session makes) end with it, through AfterFunc, and a stopped
// AfterFunc never runs.
func TestCallCtxDerived(t *testing.T) {
	_, c := enterCall(t, context.Background(), 0)
	child, cancelChild := context.WithCancel(context.WithValue(c, invocationKey{}, &invocation{}))
	defer cancelChild()
	direct, cancelDirect := context.WithCancel(c) // hooked through callCtx.AfterFunc
	defer cancelDirect()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stopped := make(chan struct{}, 1)
	stop := context.AfterFunc(c, func() { stopped <- struct{}{} })
	if !stop() {
		t.Fatal("stop of a pending AfterFunc returned false")
	}
	if child.Err() != nil || direct.Err() != nil {
		t.Fatal("derived contexts ended early")
	}
	c.release()
	waitDone(t, child.Done(), "child through WithValue")
	waitDone(t, direct.Done(), "direct child")
	waitDone(t, ran, "AfterFunc")
	if !errors.Is(direct.Err(), context.Canceled) {
		t.Fatalf("child Err %v", direct.Err())
	}
	select {
	case <-stopped:
		t.Fatal("a stopped AfterFunc ran")
	case <-time.After(20 * time.Millisecond):
	}
	// After the end, a new AfterFunc runs at once.
	late := make(chan struct{})
	context.AfterFunc(c, func() { close(late) })
	waitDone(t, late, "AfterFunc after the end")
}

// A call that never waits costs one allocation: its context. The chain it
// replaced cost 19 and hooked every call onto a stop context and a timer.
func TestCallCtxAllocations(t *testing.T) {
	g := &callGate{}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, _ := g.enter(ctx, time.Minute, time.Time{})
		_ = c.Err()
		_ = c.Value(watchdogKey{})
		c.release()
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per call, want 1", allocs)
	}
}

// A closed gate refuses new calls; shut waits for the running one.
func TestCallCtxShutWaits(t *testing.T) {
	g, c := enterCall(t, context.Background(), 0)
	idle := g.shut()
	if _, ok := g.enter(context.Background(), 0, time.Time{}); ok {
		t.Fatal("enter accepted after shut")
	}
	select {
	case <-idle:
		t.Fatal("shut did not wait for the running call")
	case <-time.After(10 * time.Millisecond):
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("running call's Err %v after shut", c.Err())
	}
	c.release()
	waitDone(t, idle, "shut after the last call")
}

// A default-timeout timer from the free list ends only a call whose
// deadline passed: its callback running late, for a call that ended, does
// not end the next call it serves.
func TestCallCtxDeadlineTimerReuse(t *testing.T) {
	g := &callGate{}
	g.init()
	late := &callCtx{parent: context.Background(), gate: g, deadline: time.Now().Add(-time.Millisecond), dl: true, own: true}
	d := startDeadline(late, time.Hour)
	d.fire() // the callback at its deadline
	if !errors.Is(late.Err(), context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline: Err %v", late.Err())
	}
	d.stop()
	next := newCallCtx(context.Background(), g, time.Hour, time.Time{})
	if next.dt == nil {
		t.Fatal("no timer for the default timeout")
	}
	next.dt.fire() // a late callback of whichever timer it got
	d.fire()       // and of the stopped one
	if err := next.Err(); err != nil {
		t.Fatalf("a stale timer callback ended the next call: %v", err)
	}
	next.release()
}

// Request.Deadline: the call's context has it as its deadline and ends at
// it with DeadlineExceeded (on the free list's timer, one allocation as
// without it); a parent deadline that is earlier is the one, a later one
// is not; without it the default timeout applies as before.
func TestCallCtxRequestDeadline(t *testing.T) {
	g := &callGate{}
	soon := time.Now().Add(30 * time.Millisecond)
	c, _ := g.enter(context.Background(), time.Hour, soon)
	if d, ok := c.Deadline(); !ok || !d.Equal(soon) {
		t.Fatalf("Deadline %v %v, want %v", d, ok, soon)
	}
	waitDone(t, c.Done(), "a call at its Request.Deadline")
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(c.causeErr(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, cause %v at the deadline", c.Err(), c.causeErr())
	}
	if time.Now().Before(soon) {
		t.Fatal("ended before its deadline")
	}
	c.release()

	early := time.Now().Add(time.Minute)
	parent, cancel := context.WithDeadline(context.Background(), early)
	defer cancel()
	c, _ = g.enter(parent, time.Hour, early.Add(time.Minute))
	if d, _ := c.Deadline(); !d.Equal(early) {
		t.Fatalf("Deadline %v, want the parent's earlier %v", d, early)
	}
	c.release()
	late := early.Add(-30 * time.Second)
	c, _ = g.enter(parent, time.Hour, late)
	if d, _ := c.Deadline(); !d.Equal(late) {
		t.Fatalf("Deadline %v, want the request's earlier %v", d, late)
	}
	c.release()
	before := time.Now()
	c, _ = g.enter(context.Background(), time.Hour, time.Time{})
	if d, _ := c.Deadline(); d.Before(before.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
		t.Fatalf("Deadline %v, want the default timeout from now", d)
	}
	c.release()

	ctx := context.Background()
	far := time.Now().Add(time.Hour)
	if allocs := testing.AllocsPerRun(1000, func() {
		c, _ := g.enter(ctx, time.Minute, far)
		_ = c.Err()
		c.release()
	}); allocs > 1 {
		t.Fatalf("%.1f allocations per call with a Request.Deadline, want 1", allocs)
	}
}

// A call whose own deadline passed ends DeadlineExceeded even when its
// parent ended after the deadline and before the deadline's timer ran (a
// server answers at the deadline on its own timer and its request context
// ends when it returns): noticed by Err or by the parent's hook. A parent
// that ends before the deadline is still why the call ended.
func TestCallCtxDeadlineBeforeParentEnd(t *testing.T) {
	g := &callGate{}
	g.init()
	for _, viaHook := range []bool{false, true} {
		parent, cancel := context.WithCancel(context.Background())
		c := &callCtx{parent: parent, gate: g, deadline: time.Now().Add(-time.Millisecond), dl: true, own: true}
		if viaHook {
			_ = c.Done() // hooks the call onto the parent
		}
		cancel()
		if viaHook {
			waitDone(t, c.Done(), "the call after its parent ended")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("hook %v: Err %v, want DeadlineExceeded (the deadline passed first)", viaHook, err)
		}
	}
	parent, cancel := context.WithCancel(context.Background())
	c := &callCtx{parent: parent, gate: g, deadline: time.Now().Add(time.Hour), dl: true, own: true}
	cancel()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("a parent ended before the deadline: Err %v, want Canceled", err)
	}
}
