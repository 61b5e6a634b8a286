package executor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// errCPUExceeded is the cancellation cause the CPU watchdog uses.
var errCPUExceeded = errors.New("cpu budget exceeded")

// errOutputCap is the cancellation cause when a command's stdout passes memMB.
var errOutputCap = errors.New("output over memory budget")

// stopper ends a guarded call with a cause: guard's fn gets one. It is an
// interface, not a context.CancelCauseFunc, so that the call's own
// context (*callCtx) is one without a method value going to the heap for
// every call.
type stopper interface{ cancelCause(cause error) }

// cancelStopper is the stopper of a context.WithCancelCause.
type cancelStopper context.CancelCauseFunc

func (f cancelStopper) cancelCause(cause error) { f(cause) }

// guard runs fn on a locked OS thread under the CPU watchdog and a context
// that is cancelled (with a cause) when the budget is spent. fn gets the
// guarded context and what cancels it.
func (t *toolEnv) guard(ctx context.Context, fn func(ctx context.Context, cancel stopper) error) (cpu time.Duration, err error, cause error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	budget := time.Duration(t.limits.cpuMs) * time.Millisecond
	if c, ok := ctx.(*callCtx); ok && c.guarded.CompareAndSwap(false, true) {
		// A call's own context (a callCtx) is the guarded one: the
		// watchdog and fn's cancel end the call, which is what ending a
		// context derived for the guard came to (the call fails with what
		// classify makes of the cause), without deriving one. The
		// watchdog comes from a free list; it holds nothing of the call
		// once released.
		wd := limits.AcquireWatchdog(limits.CurrentThread(), budget, c)
		c.wd.Store(wd)
		err = fn(c, c)
		cpu, _ = wd.Stop()
		c.wd.Store(nil)
		wd.Release()
		c.guarded.Store(false)
		return cpu, err, c.causeErr()
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := limits.StartWatchdog(limits.CurrentThread(), budget, func(time.Duration) { cancel(errCPUExceeded) })
	// The fuel meter also asks the watchdog at every refill (metering.begin), so
	// the budget holds even when the watchdog's timer runs late.
	err = fn(context.WithValue(gctx, watchdogKey{}, wd), cancelStopper(cancel))
	cpu, _ = wd.Stop()
	return cpu, err, context.Cause(gctx)
}

// sleeper makes WASI sleeps interruptible by the current call's context,
// and charges random_get to it (meteredRand). ctx is the context the instance's
// guest code currently runs under (the metered one once it is metered).
type sleeper struct {
	ctx  atomic.Pointer[context.Context] // nil or &slot[i] (set)
	slot [2]context.Context
	tape tape // the clocks and random source of a recorded or replayed call's instance (record.go)
}

// set makes c the context the instance's guest code runs under from now
// on. It is kept in the sleeper's slot i (0: the guarded context, 1: the
// metered one), not in a variable of the caller's that would go to the
// heap for every call: the instance's guest code, the only reader, runs
// on the caller's goroutine, so no reader holds a slot that set or clear
// writes (set(1) writes the slot the published one is not).
func (s *sleeper) set(i int, c context.Context) {
	s.slot[i] = c
	s.ctx.Store(&s.slot[i])
}

// clear makes the instance keep nothing of the call's contexts.
func (s *sleeper) clear() {
	s.ctx.Store(nil)
	s.slot = [2]context.Context{}
}

func (s *sleeper) sleep(ns int64) {
	var done <-chan struct{}
	if c := s.ctx.Load(); c != nil {
		done = (*c).Done()
	}
	tm := time.NewTimer(time.Duration(ns))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-done:
	}
}

func (t *toolEnv) moduleConfig(env map[string]string, sl *sleeper) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(t.id).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(sl.sleep).
		WithRandSource(sl.rand(rand.Reader)). // charged per chunk
		WithStartFunctions()
	for k, v := range env {
		mc = mc.WithEnv(k, v)
	}
	mc = t.cfg.deterministicModuleConfig(mc, sl)
	if sl.tape != nil {
		mc = tapeModuleConfig(mc, sl)
	}
	return mc
}

// handlerFailure maps a non-zero return from handle.
func (t *toolEnv) handlerFailure(inv *invocation, acct *limits.Account, rc int32) error {
	if r := acct.Refused(); r > 0 {
		return t.memExceeded(r, fmt.Sprintf("handler failed (returned %d) after its memory use reached the memMB cap", rc))
	}
	if err := inv.declaredFailure(fmt.Sprintf("handler returned %d", rc)); err != nil {
		err.Details["returned"] = rc
		return err
	}
	return &toolerr.Error{Code: toolerr.HandlerError, Message: fmt.Sprintf("handler returned %d", rc), Details: map[string]any{"returned": rc}}
}

// declaredFailure returns the handler-error the guest declared with
// error_set, or nil if it declared none.
func (inv *invocation) declaredFailure(fallback string) *toolerr.Error {
	inv.mu.Lock()
	d := inv.declared
	inv.mu.Unlock()
	if d == nil {
		return nil
	}
	e := &toolerr.Error{Code: toolerr.HandlerError, Message: d.Message, Details: map[string]any{}}
	if e.Message == "" {
		e.Message = fallback
	}
	if d.Code != "" {
		e.Details["handlerCode"] = d.Code
	}
	if len(d.Details) > 0 && json.Valid(d.Details) {
		e.Details["handlerDetails"] = json.RawMessage(d.Details)
	}
	return e
}

func (t *toolEnv) memExceeded(refused int64, msg string) error {
	return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitMemMB, Declared: t.limits.memMB, Observed: ceilMB(refused)}, msg+t.raiseHint(toolerr.LimitMemMB))
}

// classify maps an error from running guest code to a native error.
func (t *toolEnv) classify(ctx context.Context, inv *invocation, err, cause error, acct *limits.Account, cpu time.Duration, stderrTail, entry string) error {
	if errors.Is(cause, errCPUExceeded) {
		return t.cpuExceeded(cpu, "the guest")
	}
	if r := acct.Refused(); r > 0 {
		what := "memory growth past the memMB cap was refused and the guest then failed"
		if errors.Is(cause, errOutputCap) {
			what = "the guest's output passed the memMB cap"
		}
		return t.memExceeded(r, fmt.Sprintf("%s (memMB %d, the guest needed at least %s)", what, t.limits.memMB, mb(r)))
	}
	ctxErr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(d) {
		// The meter saw the deadline on the clock before the context's
		// timer fired (fuel.Meter.SetPoll).
		ctxErr = context.DeadlineExceeded
	}
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return toolerr.Wrap(toolerr.DeadlineExceeded, context.DeadlineExceeded, "the wall deadline passed before the handler finished")
	case errors.Is(ctxErr, context.Canceled):
		return toolerr.Wrap(toolerr.Cancelled, context.Canceled, "the call was cancelled")
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		code := exit.ExitCode()
		tail := strings.TrimSpace(stderrTail)
		if isGoCrash(code, tail) {
			return &toolerr.Error{Code: toolerr.HandlerTrap, Message: "the guest crashed: " + lastLines(tail, 20), Details: map[string]any{"exitCode": code}, Err: err}
		}
		if inv != nil && code != 0 {
			if err := inv.declaredFailure(fmt.Sprintf("the handler exited with code %d", code)); err != nil {
				err.Details["exitCode"] = code
				return err
			}
		}
		msg := tail
		if msg == "" {
			msg = fmt.Sprintf("the handler exited with code %d", code)
		}
		if entry != abi.ExportStart {
			msg = fmt.Sprintf("the handler exited with code %d during %s: %s", code, entry, msg)
		}
		return &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"exitCode": code}, Err: err}
	}
	var hf *hostFailure // an Extism host call failed the call
	if errors.As(err, &hf) {
		return &toolerr.Error{Code: toolerr.HandlerError, Message: hf.msg, Details: hf.details, Err: err}
	}
	var ht *hostTrap // a host function refused the call (trapf)
	if errors.As(err, &ht) {
		return &toolerr.Error{Code: toolerr.HandlerTrap, Message: "trap: " + ht.msg, Details: map[string]any{"trap": ht.msg}, Err: err}
	}
	if trap, stack, ok := parseTrap(err); ok {
		d := map[string]any{"trap": trap}
		if len(stack) > 0 {
			d["stack"] = stack
		}
		msg := "trap: " + trap
		if len(stack) > 0 {
			msg += " (at " + stack[0] + ")"
		}
		// The Go runtime reports a panic on stderr and then traps.
		if tail := strings.TrimSpace(stderrTail); isGoCrash(2, tail) {
			msg = "the guest crashed: " + lastLines(tail, 20) + "\n" + msg
		}
		return &toolerr.Error{Code: toolerr.HandlerTrap, Message: msg, Details: d, Err: err}
	}
	if inv == nil { // instantiation or guest-runtime initialisation
		return toolerr.Wrap(toolerr.HandlerTrap, err, "instantiating the handler failed")
	}
	return toolerr.Wrap(toolerr.Internal, err, "running the handler failed")
}

// isGoCrash recognises the Go runtime's fatal exit (code 2 after "panic:" or
// "fatal error:" on stderr): a trap in Go's terms, not a handler decision.
func isGoCrash(code uint32, tail string) bool {
	if code != 2 {
		return false
	}
	for _, line := range strings.Split(tail, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "runtime: ") {
			return true
		}
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parseTrap extracts the trap name and Wasm stack from a wazero error.
func parseTrap(err error) (trap string, stack []string, ok bool) {
	s := err.Error()
	// wazero reports a stack overflow bare, without "wasm error:" or a stack.
	if s == "stack overflow" || strings.HasSuffix(s, ": stack overflow") {
		return "stack overflow", nil, true
	}
	i := strings.Index(s, "wasm error: ")
	if i < 0 {
		return "", nil, false
	}
	rest := s[i+len("wasm error: "):]
	lines := strings.Split(rest, "\n")
	trap = strings.TrimSpace(lines[0])
	inStack := false
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "wasm stack trace:"):
			inStack = true
		case inStack && l != "" && len(stack) < 32:
			stack = append(stack, l)
		}
	}
	return trap, stack, true
}
