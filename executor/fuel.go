package executor

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// Guests are interrupted through fuel metering (internal/fuel) rather than
// wazero's WithCloseOnContextDone, which makes compiled code leave the guest
// at every loop header (13–25× slower on tight loops). The pass instruments
// a module once per tool load (its output is cached in memory by input
// digest and pass version, so reloading a tool never reruns it); every call
// gets an unlimited counter and a context.AfterFunc that interrupts the guest
// when the call's context ends — the CPU watchdog, the wall deadline and
// cancellation all end it. A module the pass refuses (an opcode it does not
// know) runs on a runtime with WithCloseOnContextDone instead: that is the
// only place close-on-context-done remains.

type fuelKey struct {
	digest  [sha256.Size]byte
	version int
}

type fuelEntry struct {
	out []byte
	err error
}

// instrument returns bin metered, from the executor's cache when it has it.
func (e *Executor) instrument(bin []byte) ([]byte, error) {
	key := fuelKey{sha256.Sum256(bin), fuel.Version}
	if v, ok := e.fuelCache.Load(key); ok {
		ent := v.(fuelEntry)
		return ent.out, ent.err
	}
	out, _, err := fuel.Instrument(bin)
	e.fuelCache.Store(key, fuelEntry{out, err})
	return out, err
}

// metering is one instance's fuel meter, or nil for an unmetered module.
type metering struct{ m *fuel.Meter }

func newMetering(mod api.Module) (*metering, error) {
	m, err := fuel.NewMeter(mod)
	if err != nil {
		return nil, err
	}
	return &metering{m: m}, nil
}

// begin prepares a call into the instance under ctx: unlimited fuel, an
// interrupt when ctx ends. It returns the context to call with and a
// function that must run when the call returns.
func (mt *metering) begin(ctx context.Context) (context.Context, func()) {
	if mt == nil {
		return ctx, func() {}
	}
	mt.m.Set(fuel.Unlimited)
	stop := context.AfterFunc(ctx, mt.m.Interrupt)
	return mt.m.Context(ctx), func() { stop() }
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

// Metered reports whether the tool's guest is interrupted through fuel
// metering (false: the pass refused the module and wazero's
// close-on-context-done stands in).
func (t *Tool) Metered() bool { return t.metered }
