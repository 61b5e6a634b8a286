package fuel

import (
	"errors"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// ErrNotMetered is returned by NewMeter for a module Instrument did not
// produce.
var ErrNotMetered = errors.New("module has no fuel counter")

// Meter reads and writes an instrumented instance's fuel counter. Set and
// Remaining must not run concurrently with guest code of the instance
// (call them between calls); Interrupt may.
type Meter struct {
	g api.MutableGlobal
}

// NewMeter returns the meter of an instance of an instrumented module.
func NewMeter(mod api.Module) (*Meter, error) {
	g, ok := mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	if !ok || g.Type() != api.ValueTypeI64 {
		return nil, ErrNotMetered
	}
	return &Meter{g: g}, nil
}

// Set makes n the fuel left. Use Unlimited for no budget.
func (m *Meter) Set(n int64) { m.g.Set(uint64(n)) }

// Remaining returns the fuel left; it is negative once the guest ran out or
// was interrupted (the guest then trapped with "unreachable").
func (m *Meter) Remaining() int64 { return int64(m.g.Get()) }

// Exhausted reports whether the counter is negative: a trap the guest just
// raised came from the pass (fuel exhaustion or Interrupt), not from the
// guest's own code.
func (m *Meter) Exhausted() bool { return m.Remaining() < 0 }

// Interrupt makes the counter negative so the guest traps at its next check.
// It may be called from any goroutine while the guest runs. The guest's own
// read-modify-write of the counter can overwrite a concurrent Interrupt, so a
// caller that must stop the guest repeats it until the call returns; Watch
// does that.
func (m *Meter) Interrupt() { m.Set(Interrupted) }

// retryInterval is how often an Interrupter repeats Interrupt. The race it
// covers is a window of a few instructions, so one repetition virtually
// always suffices.
const retryInterval = 500 * time.Microsecond

// Interrupter stops one guest call from other goroutines. Get one with
// Watch before the call; Stop it once the call has returned.
type Interrupter struct {
	m       *Meter
	mu      sync.Mutex
	fired   bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// Watch returns an Interrupter for the next call on m's instance.
func (m *Meter) Watch() *Interrupter {
	return &Interrupter{m: m, stop: make(chan struct{}), done: make(chan struct{})}
}

// Interrupt makes the guest trap at its next check and keeps the counter
// negative until Stop. It is safe for concurrent use and idempotent; after
// Stop it does nothing.
func (i *Interrupter) Interrupt() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.fired || i.stopped {
		return
	}
	i.fired = true
	i.m.Interrupt()
	go func() {
		defer close(i.done)
		t := time.NewTicker(retryInterval)
		defer t.Stop()
		for {
			select {
			case <-i.stop:
				return
			case <-t.C:
				i.m.Interrupt()
			}
		}
	}()
}

// Stop ends the watch and reports whether Interrupt was called. It must be
// called after the guest call returned; afterwards nothing writes the
// counter, so Remaining is safe.
func (i *Interrupter) Stop() (interrupted bool) {
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
		return i.fired
	}
	i.stopped = true
	fired := i.fired
	close(i.stop)
	i.mu.Unlock()
	if fired {
		<-i.done
	}
	return fired
}
