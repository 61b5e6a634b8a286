package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// metering is one instance's fuel meter, or nil for an unmetered module.
type metering struct {
	m     *fuel.Meter
	start int64  // the budget the current call started with
	end   func() // begin's done: the meter forgets the call's watchdog
}

func newMetering(mod api.Module) (*metering, error) {
	m, err := fuel.NewMeter(mod)
	if err != nil {
		return nil, err
	}
	mt := &metering{m: m}
	mt.end = func() { mt.m.SetPoll(nil) }
	return mt, nil
}

// begin prepares a call into the instance under ctx: budget units of fuel
// (0: unlimited); the guest stops when ctx ends (refill checks it at every
// Slice). It returns the context to call with and a function that must run
// when the call returns.
func (mt *metering) begin(ctx context.Context, budget int64) (context.Context, func()) {
	if mt == nil {
		return ctx, func() {}
	}
	mt.prepare(ctx, budget)
	return mt.m.Context(ctx), mt.end
}

// beginCall is begin for a guest call that also carries tables (the
// instance's table account, fuel.WithTableAccount) and the invocation
// (invocationFrom): one context node for the three (fuel.CallContext)
// instead of three. done must run when the call returns (nil: nothing to).
func (mt *metering) beginCall(ctx context.Context, budget int64, tables fuel.TableAccount, inv *invocation) (cctx context.Context, done func()) {
	var m *fuel.Meter
	if mt != nil {
		mt.prepare(ctx, budget)
		m, done = mt.m, mt.end
	}
	return fuel.CallContext(ctx, m, tables, invocationKey{}, inv), done
}

// prepare sets the meter for a call under ctx with budget units of fuel.
func (mt *metering) prepare(ctx context.Context, budget int64) {
	if budget <= 0 {
		budget = fuel.Unlimited
	}
	mt.start = budget
	mt.m.Set(budget)
	if wd, _ := ctx.Value(watchdogKey{}).(*limits.Watchdog); wd != nil {
		mt.m.SetPoll(wd.Poll())
	} else {
		mt.m.SetPoll(nil)
	}
}

// watchdogKey carries the CPU watchdog of the call (Tool.guard) to
// metering.begin, which has the meter poll it at every refill.
type watchdogKey struct{}

// used returns the fuel the last call consumed (0 for an unmetered module).
func (mt *metering) used() int64 {
	if mt == nil {
		return 0
	}
	if r := mt.m.Remaining(); r < mt.start {
		return mt.start - r
	}
	return 0
}

// ranOut reports whether the last call trapped because its fuel budget was
// spent (not because it was interrupted, nor by a trap of its own): the
// host decided so at the first check at which the guest had been charged
// more than the budget (fuel.Meter.OutOfFuel), so used is what it had been
// charged there.
func (mt *metering) ranOut() bool {
	return mt != nil && mt.m.OutOfFuel()
}

// overdrawn reports whether the last call returned normally having been
// charged more than its budget. Charged per segment (internal/fuel's doc,
// Charge per segment), the guest pays the segments it runs after its last
// check without a comparison, so a call can reach its end past the budget
// with no check left to see it: the end of the call is that check.
func (mt *metering) overdrawn() bool {
	return mt != nil && mt.start != fuel.Unlimited && mt.m.Remaining() < 0
}

// unmeteredRefused is the load error of a module the pass refused.
func unmeteredRefused(err error) error {
	why := err.Error()
	if te, ok := errors.AsType[*toolerr.Error](err); ok {
		why = te.Message // without the code repeated
	}
	return &toolerr.Error{Code: toolerr.HandlerShapeInvalid, Err: err,
		Message: "the fuel pass cannot meter this module, so it could be neither interrupted at host calls nor charged for its work; " +
			"it is refused (an operator may allow unmetered modules, stopped by close-on-context-done, with --allow-unmetered): " + why}
}

// fuelExceeded is the limits-exceeded error of a spent fuel budget.
func (t *toolEnv) fuelExceeded(used int64) error {
	b := t.cfg.fuelBudget
	return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitFuel, Declared: b, Observed: used},
		fmt.Sprintf("the guest spent its fuel budget of %d units", b))
}

// runStart calls the module's start function, which the pass turned into an
// export so that it runs metered.
func runStart(ctx context.Context, mod api.Module) error {
	if f := mod.ExportedFunction(fuel.StartExport); f != nil {
		_, err := f.Call(ctx)
		return err
	}
	return nil
}

// exitedOK reports whether err is a clean proc_exit(0).
func exitedOK(err error) bool {
	var exit *sys.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == 0
}
