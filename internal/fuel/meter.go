package fuel

import (
	"errors"
	"sync"

	"github.com/tetratelabs/wazero/api"
)

// ErrNotMetered is returned by NewMeter for a module Instrument did not
// produce.
var ErrNotMetered = errors.New("module has no fuel counter")

// Meter reads and writes an instrumented instance's fuel counter and floor.
// Set, Remaining and Exhausted must not run concurrently with guest code of
// the instance (call them between calls); Interrupt may.
type Meter struct {
	fuel, limit api.MutableGlobal
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

// Set makes n the fuel left and lowers the floor to 0 (undoing an
// Interrupt). Use Unlimited for no budget.
func (m *Meter) Set(n int64) {
	m.fuel.Set(uint64(n))
	m.limit.Set(0)
}

// Remaining returns the fuel left; it is negative once the guest ran out.
// After an Interrupt it is meaningless.
func (m *Meter) Remaining() int64 { return int64(m.fuel.Get()) }

// Exhausted reports whether the counter is below the floor: a trap the guest
// just raised came from the pass (fuel exhaustion or Interrupt), not from
// the guest's own code.
func (m *Meter) Exhausted() bool { return int64(m.fuel.Get()) < int64(m.limit.Get()) }

// Interrupt raises the floor so the guest traps at its next check. It is one
// store, safe to make from any goroutine while the guest runs; use an
// Interrupter to order it with the Meter's other methods.
func (m *Meter) Interrupt() { m.limit.Set(uint64(Interrupted)) }

// Interrupter stops one guest call from other goroutines. Get one with
// Watch before the call and Stop it once the call has returned; after Stop
// nothing writes the meter, so its other methods are safe.
type Interrupter struct {
	m       *Meter
	mu      sync.Mutex
	fired   bool
	stopped bool
}

// Watch returns an Interrupter for the next call on m's instance.
func (m *Meter) Watch() *Interrupter { return &Interrupter{m: m} }

// Interrupt makes the guest trap at its next check. It is safe for
// concurrent use and idempotent; after Stop it does nothing.
func (i *Interrupter) Interrupt() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.fired && !i.stopped {
		i.fired = true
		i.m.Interrupt()
	}
}

// Stop ends the watch and reports whether Interrupt took effect. Call it
// after the guest call returned.
func (i *Interrupter) Stop() (interrupted bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.stopped = true
	return i.fired
}
