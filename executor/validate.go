package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Validating a call's input and output is host work done for the call, so
// it is metered like the guest's (G01): it runs on a locked OS thread whose
// CPU time is charged to usage.cpuMs, within the work budget of the tool's
// cpuMs (manifest.WorkLimit), and it is stopped, within a fraction of a
// millisecond of work, when the call's context ends (deadline,
// cancellation, Close). Output validation is the guest's doing: it also
// counts against what is left of the guest's cpuMs, and a result is never
// returned once the call's deadline has passed.

// errValidationCPU stops an output validation that spent the guest's cpuMs.
var errValidationCPU = errors.New("output validation passed the cpuMs budget")

// validateInput validates the call's input (filling defaults) under c and
// returns it with the CPU time validating took. Over the work budget:
// input-validation-failed naming it; c ended: deadline-exceeded or
// cancelled.
func (t *Tool) validateInput(c context.Context, input []byte) ([]byte, time.Duration, error) {
	var out []byte
	cpu, err := t.validating(c, 0, func(w manifest.Work) (err error) {
		// Validation holds host memory for the call: it is bounded by the
		// call's memMB (manifest.ValueCost per JSON value; F18).
		out, err = t.m.ValidateInputLimited(input, t.limits.memMB*limits.MiB, w)
		return err
	})
	return out, cpu, err
}

// resolveNeedsMetered is resolveNeeds under c and the tool's work budget;
// it returns the CPU time validating took.
func (t *Tool) resolveNeedsMetered(c context.Context, cc *CallContext) (env map[string]string, cfg map[string][]byte, cpu time.Duration, err error) {
	if len(t.needs.env) == 0 && len(t.needs.config) == 0 {
		env, cfg, err = t.resolveNeeds(cc, manifest.Work{})
		return env, cfg, 0, err
	}
	cpu, err = t.validating(c, 0, func(w manifest.Work) (err error) {
		env, cfg, err = t.resolveNeeds(cc, w)
		return err
	})
	return env, cfg, cpu, err
}

// needsStopped is the error of a needsSpec value's validation that its
// Work stopped (at pointer): over the budget, input-validation-failed
// naming it; otherwise the Check's error. nil for any other err (nil, or
// the value is not JSON).
func needsStopped(pointer string, err error) error {
	var werr *manifest.WorkError
	var te *toolerr.Error
	switch {
	case errors.As(err, &werr):
		return &toolerr.Error{Code: toolerr.InputValidationFailed,
			Message: fmt.Sprintf("call context value %s is refused: %v: raise limits.cpuMs, send a smaller value or simplify the schema", pointer, err),
			Details: map[string]any{"budget": "validationWork", "limit": werr.Limit, "raise": "limits.cpuMs", "pointer": pointer}, Err: err}
	case errors.As(err, &te):
		return te
	}
	return nil
}

// validateOutput validates the guest's output under c within the memMB
// headroom budget and the cpuMs the guest left (guest: its CPU time), and
// returns it with the CPU time validating took. Over the work budget:
// output-validation-failed naming it; past the cpuMs left:
// limits-exceeded (cpuMs), as if the guest had spent it; c ended:
// deadline-exceeded or cancelled.
func (t *Tool) validateOutput(c context.Context, output []byte, budget int64, guest time.Duration) (json.RawMessage, time.Duration, error) {
	var out json.RawMessage
	left := time.Duration(0)
	if t.limits.cpuMs > 0 {
		left = max(time.Duration(t.limits.cpuMs)*time.Millisecond-guest, 1)
	}
	cpu, err := t.validating(c, left, func(w manifest.Work) (err error) {
		out, err = t.m.ValidateOutputLimited(output, budget, w)
		return err
	})
	if errors.Is(err, errValidationCPU) {
		used := guest + cpu
		err = t.cpuExceeded(used, fmt.Sprintf("the guest (%d ms) and validating its output (%d ms)", guest.Milliseconds(), cpu.Milliseconds()))
	}
	return out, cpu, err
}

// validating runs fn on a locked OS thread with the tool's work budget and a
// Check that ends it when c ends or, with cpuLeft > 0, when the thread's
// CPU time passes cpuLeft (errValidationCPU). It returns the CPU time fn
// took.
//
// The thread's CPU clock costs a system call per read (and one to name the
// thread), so it is read only from the first Check at least
// wallBeforeMetering after fn began: a validation shorter than that (an
// ordinary document: a few microseconds) is charged the wall time it took,
// which on one thread is never less than its CPU time; a longer one is
// charged the wall time up to that Check plus the thread's CPU time from
// it.
func (t *toolEnv) validating(c context.Context, cpuLeft time.Duration, fn func(manifest.Work) error) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := validationMeters.Get().(*validationMeter)
	m.c, m.cpuLeft, m.start, m.metered = c, cpuLeft, time.Now(), false
	m.deadline, m.hasDeadline = c.Deadline()
	err := fn(manifest.Work{Limit: manifest.WorkLimit(t.limits.cpuMs), Check: m.check})
	used := m.used()
	*m = validationMeter{check: m.check}
	validationMeters.Put(m)
	return used, err
}

// validationMeter is one validating call's clocks and its Work's Check.
// Meters are pooled with their Check bound (m.check is m.doCheck), so a
// validation allocates neither.
type validationMeter struct {
	c           context.Context
	cpuLeft     time.Duration
	deadline    time.Time
	hasDeadline bool
	start       time.Time          // wall clock when the validation began
	metered     bool               // the thread's CPU clock is read
	clock       limits.ThreadClock // when metered: the validating thread's
	before      time.Duration      // when metered: wall time from start to metering
	cpuStart    time.Duration      // when metered: clock when metering began
	check       func() error
}

var validationMeters = sync.Pool{New: func() any {
	m := new(validationMeter)
	m.check = m.doCheck
	return m
}}

// used is what the validation has taken so far (see validating).
func (m *validationMeter) used() time.Duration {
	if m.metered {
		return m.before + m.clock.Now() - m.cpuStart
	}
	return time.Since(m.start)
}

func (m *validationMeter) doCheck() error {
	if !m.metered {
		if since := time.Since(m.start); since >= wallBeforeMetering {
			m.before = since
			m.clock = limits.CurrentThread()
			m.cpuStart = m.clock.Now()
			m.metered = true
		}
	}
	if err := m.c.Err(); err != nil {
		return stopError(m.c, err)
	}
	// The clock itself, not only the context's timer, which a loaded
	// machine can run late.
	if m.hasDeadline && !time.Now().Before(m.deadline) {
		return toolerr.As(context.DeadlineExceeded)
	}
	if m.cpuLeft > 0 && m.used() > m.cpuLeft {
		return errValidationCPU
	}
	return nil
}

// wallBeforeMetering is how long a validation runs, charged its wall time,
// before validating reads its thread's CPU clock (see validating).
const wallBeforeMetering = 100 * time.Microsecond

// stopError is the error of a call whose context c ended with err: a
// caller's cancellation says what a cancelled guest run says, whatever
// stage it found the call in.
func stopError(c context.Context, err error) error {
	if errors.Is(err, context.Canceled) && callerCancelled(c) {
		return toolerr.Wrap(toolerr.Cancelled, context.Canceled, "the call was cancelled")
	}
	return toolerr.As(err)
}

// callerCancelled reports whether c ended because its caller cancelled it
// (not because the tool closed or a budget stopped it).
func callerCancelled(c context.Context) bool {
	var cause error
	if cc, ok := c.(*callCtx); ok {
		cause = cc.causeErr()
	} else {
		cause = context.Cause(c)
	}
	return cause == nil || errors.Is(cause, context.Canceled)
}

func cpuMs(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }
