package executor

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
)

// commandHandler runs a WASI command: every call instantiates the module
// with the input on stdin and runs _start; stdout is the output.
type commandHandler struct {
	*toolEnv
	*wasmCode
}

func (t *commandHandler) style() Style { return Command }

func (t *commandHandler) close(ctx context.Context) error { return t.runtime.Close(ctx) }

func (t *commandHandler) run(ctx context.Context, inv *invocation, env map[string]string) *runOutcome {
	acct := limits.NewAccount(t.memLimit)
	inv.acct = acct
	if !acct.Reserve(int64(len(inv.input))) {
		return &runOutcome{err: t.memExceeded(acct.Refused(), fmt.Sprintf("the input (%s) does not fit in memMB %d", mb(int64(len(inv.input))), t.limits.memMB))}
	}
	stdout := &cappedBuffer{acct: acct}
	stderr := newLineForwarder(t.cfg.guestStderr, t.id, "stderr")
	sl := &sleeper{tape: inv.tape}
	mc := t.moduleConfig(env, sl).
		WithStdin(bytes.NewReader(inv.input)).
		WithStdout(stdout).
		WithStderr(stderr)
	if !t.metered {
		mc = mc.WithStartFunctions(abi.ExportStart)
	}
	var meter *metering
	cpu, err, cause := t.guard(ctx, func(gctx context.Context, cancel stopper) error {
		sl.ctx.Store(&gctx)
		stdout.onOverflow = func() { cancel.cancelCause(errOutputCap) }
		tables := newTableAccount(acct)
		if !tables.ReserveTable(t.verdict.TableElems) {
			return errTablesOverMem
		}
		ictx := experimental.WithMemoryAllocator(fuel.WithTableAccount(context.WithValue(gctx, invocationKey{}, inv), tables), acct.Allocator())
		mod, err := t.runtime.InstantiateModule(ictx, t.compiled, mc)
		if mod != nil {
			defer mod.Close(gctx)
		}
		if err != nil || !t.metered {
			return err
		}
		if meter, err = newMetering(mod); err != nil {
			return err
		}
		cctx, done := meter.begin(ictx, t.cfg.fuelBudget)
		defer done()
		sl.ctx.Store(&cctx)
		if err = runStart(cctx, mod); err == nil {
			_, err = mod.ExportedFunction(abi.ExportStart).Call(cctx)
		}
		if exitedOK(err) {
			err = nil
		}
		return err
	})
	stderr.Flush()
	out := &runOutcome{cpu: cpu, peak: acct.Peak(), fuel: meter.used(), acquired: AcquiredInstantiated}
	if err != nil {
		if meter.ranOut() && cause == nil {
			out.err = t.fuelExceeded(out.fuel)
			return out
		}
		out.err = t.classify(ctx, inv, err, cause, acct, cpu, stderr.Tail(), "_start")
		return out
	}
	if meter.overdrawn() {
		out.err = t.fuelExceeded(out.fuel)
		return out
	}
	out.output = stdout.buf.Bytes()
	return out
}
