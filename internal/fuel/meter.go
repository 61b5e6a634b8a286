package fuel

import (
	"context"
	"errors"

	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// ErrNotMetered is returned by NewMeter for a module Instrument did not
// produce.
var ErrNotMetered = errors.New("module has no fuel counter")

// Slice is how much fuel a guest spends between two calls of the refill
// host function: the most an Interrupt waits for, and the most a garbage
// collection waits for a spinning guest. About a millisecond of guest work.
const Slice int64 = 1 << 20

// HostModule instantiates, in r, the host module every instrumented module
// imports (ImportModule). Instantiate it once per runtime, before the
// instrumented modules.
func HostModule(ctx context.Context, r wazero.Runtime) (api.Module, error) {
	return r.NewHostModuleBuilder(ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(refill), nil, nil).Export(ImportName).
		Instantiate(ctx)
}

type meterKey struct{}

// refill runs on the guest's goroutine whenever the counter drops below the
// floor. Being a call into Go, it is also where the Go scheduler gets the
// thread back. It lowers the floor by a Slice, or leaves it, so that the
// guest traps: when the budget is spent (the counter is negative), or the
// call's Meter was interrupted, or the context of the call (the one Meter.Context
// returned, or one derived from it) is done — so a deadline or a
// cancellation stops the guest without any goroutine watching the context.
func refill(ctx context.Context, mod api.Module, _ []uint64) {
	fuel, ok1 := mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	limit, ok2 := mod.ExportedGlobal(LimitExport).(api.MutableGlobal)
	if !ok1 || !ok2 {
		panic(ErrNotMetered)
	}
	if m, _ := ctx.Value(meterKey{}).(*Meter); m != nil && (m.interrupted.Load() || ctx.Err() != nil) {
		m.interrupted.Store(true)
		limit.Set(uint64(Interrupted))
		return
	}
	f := int64(fuel.Get())
	if f < 0 {
		return // spent: the floor (>= 0) stays above the counter
	}
	limit.Set(uint64(max(0, f-Slice)))
}

// Meter reads and sets an instrumented instance's fuel. Set, Remaining and
// Exhausted must not run concurrently with guest code of the instance (call
// them between calls); Interrupt may.
type Meter struct {
	fuel, limit api.MutableGlobal
	interrupted atomic.Bool
}

// NewMeter returns the meter of an instance of an instrumented module.
func NewMeter(mod api.Module) (*Meter, error) {
	fuel, ok1 := mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	limit, ok2 := mod.ExportedGlobal(LimitExport).(api.MutableGlobal)
	if !ok1 || !ok2 || fuel.Type() != api.ValueTypeI64 || limit.Type() != api.ValueTypeI64 {
		return nil, ErrNotMetered
	}
	return &Meter{fuel: fuel, limit: limit}, nil
}

// Context returns ctx carrying m: calls into the instance must use it (or a
// context derived from it) for Interrupt, and the end of ctx, to reach them.
func (m *Meter) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

// Set makes n the fuel left and clears an earlier Interrupt. Use Unlimited
// for no budget.
func (m *Meter) Set(n int64) {
	m.interrupted.Store(false)
	m.fuel.Set(uint64(n))
	m.limit.Set(uint64(max(0, n-Slice)))
}

// Remaining returns the fuel left; it is negative once the guest ran out.
func (m *Meter) Remaining() int64 { return int64(m.fuel.Get()) }

// Exhausted reports whether the counter is below the floor after a call: a
// trap the guest just raised came from the pass (the budget was spent or
// Interrupt was called), not from the guest's own code.
func (m *Meter) Exhausted() bool { return int64(m.fuel.Get()) < int64(m.limit.Get()) }

// Interrupt makes a running guest trap within a Slice of fuel, at its next
// refill. It is safe to call from any goroutine at any time; Set clears it.
func (m *Meter) Interrupt() { m.interrupted.Store(true) }

// Interrupted reports whether Interrupt was called since the last Set.
func (m *Meter) Interrupted() bool { return m.interrupted.Load() }
