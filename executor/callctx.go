package executor

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// callCtx is the context one call runs under, from Tool.invoke to its end.
// Four things end it, as they ended the chain of contexts it replaces (the
// call gate's WithCancelCause and AfterFunc, WithTimeout for the default
// timeout, Tool.guard's WithCancelCause and its watchdog value): the
// caller's context, the tool's Close (callGate), the default timeout when
// the caller set no deadline, and the guest's CPU watchdog or a handler
// (Tool.guard's cancel). That chain cost 19 allocations and 1.6 KB a call
// and registered every call with a stop context and a timer; a callCtx is
// one allocation and registers nothing with shared state until someone
// waits for it:
//
//   - Err checks the caller's context and the gate itself (the fuel meter
//     reads Err at every refill and fuel.Check at every host call, so a
//     running guest stops as before);
//   - the default timeout is a timer from a free list (deadlineTimer), as
//     WithTimeout's was, without the allocation;
//   - the first Done or AfterFunc (a WASI sleep, an HTTP request, wazero's
//     close-on-context-done) hooks the call onto the caller's context and a
//     gate stop context, so a waiter is woken as before.
//
// Err, Done, Deadline and Value keep the context.Context contract; cause is
// context.Cause's answer for the context the chain ended in.
type callCtx struct {
	parent   context.Context
	gate     *callGate
	deadline time.Time
	dl       bool // a deadline (the parent's or the default timeout)
	own      bool // the deadline is the default timeout's or Request.Deadline (dt)
	dt       *deadlineTimer

	ended   atomic.Bool                     // err is set
	guarded atomic.Bool                     // a Tool.guard runs on it
	wd      atomic.Pointer[limits.Watchdog] // the running guard's (Value(watchdogKey{}))

	mu     sync.Mutex
	err    error
	cause  error
	done   chan struct{} // made by the first Done or AfterFunc
	armed  bool
	hooks  []*afterHook
	unhook []func() bool // the parent's and the gate's AfterFunc
}

type afterHook struct{ f func() }

// newCallCtx is the context of a call entering g under parent; deadline,
// when set, is the call's own (Request.Deadline: parent's, when earlier,
// is the one); timeout is the deadline it gets when neither is set (0:
// none).
func newCallCtx(parent context.Context, g *callGate, timeout time.Duration, deadline time.Time) *callCtx {
	c := &callCtx{parent: parent, gate: g}
	if d, ok := parent.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		c.deadline, c.dl = d, true
	} else if !deadline.IsZero() {
		// The caller's deadline on the free list's timer, as the default
		// timeout's: no context of the caller's own for it.
		c.deadline, c.dl, c.own = deadline, true, true
		c.dt = startDeadline(c, time.Until(deadline))
	} else if timeout > 0 {
		c.deadline, c.dl, c.own = time.Now().Add(timeout), true, true
		c.dt = startDeadline(c, timeout)
	}
	return c
}

// deadlineTimer ends the call it serves at the call's default timeout.
// Timers come from a free list (a time.AfterFunc per call is an allocation
// and a new timer): Stop cannot wait for a callback already running, so a
// callback may run after its call ended and the timer serves the next one;
// it therefore ends only a call whose deadline has passed on the clock,
// which the next call's has not.
type deadlineTimer struct {
	t *time.Timer
	c atomic.Pointer[callCtx]
}

var deadlineTimers sync.Pool

func startDeadline(c *callCtx, timeout time.Duration) *deadlineTimer {
	d, _ := deadlineTimers.Get().(*deadlineTimer)
	if d == nil {
		d = &deadlineTimer{}
		d.c.Store(c)
		d.t = time.AfterFunc(timeout, d.fire)
		return d
	}
	d.c.Store(c)
	d.t.Reset(timeout)
	return d
}

func (d *deadlineTimer) fire() {
	if c := d.c.Load(); c != nil && !time.Now().Before(c.deadline) {
		c.cancel(context.DeadlineExceeded, context.DeadlineExceeded)
	}
}

// stop stops d and gives it back to the free list, serving no call.
func (d *deadlineTimer) stop() {
	d.t.Stop()
	d.c.Store(nil)
	deadlineTimers.Put(d)
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, c.dl }

// Err returns why the call ended, or nil. It notices the end of the
// caller's context and a Close of the tool itself, without waiting for
// anything to be signalled.
func (c *callCtx) Err() error {
	if !c.ended.Load() {
		switch err := c.parent.Err(); {
		case err != nil:
			c.parentEnded()
		case c.gate.closing.Load():
			c.cancel(context.Canceled, errToolClosing)
		default:
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// causeErr returns the cause of the call's end (as context.Cause), or nil.
func (c *callCtx) causeErr() error {
	if c.Err() == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked()
	return c.done
}

func (c *callCtx) Value(key any) any {
	if _, ok := key.(watchdogKey); ok {
		if wd := c.wd.Load(); wd != nil {
			return wd
		}
	}
	return c.parent.Value(key)
}

// AfterFunc implements context's afterFuncer, so that a context derived
// from the call's (context.WithCancel, context.AfterFunc) is hooked onto it
// without a goroutine: f runs in its own goroutine once the call ended.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	h := &afterHook{f: f}
	c.mu.Lock()
	c.armLocked()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.hooks = append(c.hooks, h)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i := slices.Index(c.hooks, h); i >= 0 {
			c.hooks = slices.Delete(c.hooks, i, i+1)
			return true
		}
		return false
	}
}

// armLocked makes the done channel and hooks the call onto what can end it
// without an Err: the parent's end and the gate's stop context. c.mu is
// held.
func (c *callCtx) armLocked() {
	if c.armed {
		return
	}
	c.armed = true
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return
	}
	// Each hook runs in a goroutine of its own (context.AfterFunc), never
	// under c.mu.
	if c.parent.Done() != nil {
		c.unhook = append(c.unhook, context.AfterFunc(c.parent, c.parentEnded))
	}
	g := c.gate
	c.unhook = append(c.unhook, context.AfterFunc(g.stops[g.next.Add(1)%gateShards], func() { c.cancel(context.Canceled, errToolClosing) }))
}

// parentEnded ends the call for its parent's end. A call whose own
// deadline (Request.Deadline, the default timeout) has passed by then ends
// DeadlineExceeded: its deadline timer may not have run yet, and a parent
// ended after the deadline (a server that answered at the deadline and
// returned) is not why the call ended.
func (c *callCtx) parentEnded() {
	if c.own && !time.Now().Before(c.deadline) {
		c.cancel(context.DeadlineExceeded, context.DeadlineExceeded)
		return
	}
	c.cancel(c.parent.Err(), context.Cause(c.parent))
}

// cancel ends the call with err and cause (nil: err), unless it ended.
func (c *callCtx) cancel(err, cause error) {
	if cause == nil {
		cause = err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err, c.cause = err, cause
	c.ended.Store(true)
	if c.done != nil {
		close(c.done)
	}
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, h := range hooks {
		go h.f()
	}
}

// cancelCause is a guard's cancel function on the call's context.
func (c *callCtx) cancelCause(cause error) { c.cancel(context.Canceled, cause) }

// CPUExceeded implements limits.Exceeder: the guard's watchdog ends the
// call.
func (c *callCtx) CPUExceeded(time.Duration) { c.cancel(context.Canceled, errCPUExceeded) }

// release ends the call (context.Canceled, as the chain's last cancel did),
// unhooks it from what it was hooked onto and leaves the gate. It runs
// once, when Tool.invoke returns.
func (c *callCtx) release() {
	c.cancel(context.Canceled, nil)
	if c.dt != nil {
		c.dt.stop()
		c.dt = nil
	}
	c.mu.Lock()
	unhook := c.unhook
	c.unhook = nil
	c.mu.Unlock()
	for _, stop := range unhook {
		stop()
	}
	c.gate.leave()
}
