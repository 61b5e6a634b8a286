package fuel

import (
	"context"
	"errors"
	"math"

	"sync/atomic"
	"time"

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
	i32 := []api.ValueType{api.ValueTypeI32}
	return r.NewHostModuleBuilder(ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(refill), nil, nil).Export(ImportName).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(tableReserve), i32, i32).Export(ReserveName).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(tableRelease), i32, nil).Export(ReleaseName).
		Instantiate(ctx)
}

// tableReserve is ReserveName: the guest's table.grow asks for n more
// elements; 1 grants them (charged to the call's TableAccount), 0 refuses
// (no account in the context, or the account says no). An interrupted
// call traps here.
func tableReserve(ctx context.Context, _ api.Module, stack []uint64) {
	Check(ctx)
	n := int64(uint32(stack[0]))
	stack[0] = 0
	if a := TableAccountFrom(ctx); a != nil && a.ReserveTable(n) {
		stack[0] = 1
	}
}

// tableRelease is ReleaseName: a growth the host granted failed in wazero.
func tableRelease(ctx context.Context, _ api.Module, stack []uint64) {
	if a := TableAccountFrom(ctx); a != nil {
		a.ReleaseTable(int64(uint32(stack[0])))
	}
}

type meterKey struct{}

// refill runs on the guest's goroutine whenever the counter drops below the
// floor. Being a call into Go, it is also where the Go scheduler gets the
// thread back. It lowers the floor by a Slice (to at most a Slice below the
// counter it finds, never below 0), or raises it above the counter, so that
// the guest traps: to Spent when the budget is spent (the counter is
// negative), to Interrupted when the call's Meter was interrupted or the
// context of the call (the one Meter.Context returned, or one derived from
// it) is done — so a deadline or a cancellation stops the guest without any
// goroutine watching the context.
func refill(ctx context.Context, mod api.Module, _ []uint64) {
	fuel, ok1 := mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	limit, ok2 := mod.ExportedGlobal(LimitExport).(api.MutableGlobal)
	if !ok1 || !ok2 {
		panic(ErrNotMetered)
	}
	if m, _ := ctx.Value(meterKey{}).(*Meter); m != nil && (m.interrupted.Load() || ctx.Err() != nil || m.polled(ctx)) {
		m.interrupted.Store(true)
		limit.Set(uint64(Interrupted))
		return
	}
	f := int64(fuel.Get())
	if f < 0 {
		// Spent: this is the first check at which the guest had been
		// charged more than its budget (every earlier one found the count
		// at least 0, since the floor never goes below 0), and the counter
		// holds exactly what it was charged. The floor goes above it, so
		// the guest traps, and says why.
		limit.Set(uint64(Spent))
		return
	}
	limit.Set(uint64(max(0, f-Slice)))
}

// Meter reads and sets an instrumented instance's fuel. Set, Remaining and
// Exhausted must not run concurrently with guest code of the instance (call
// them between calls); Interrupt may.
type Meter struct {
	fuel, limit api.MutableGlobal
	interrupted atomic.Bool
	// poll, when set, is asked at every refill whether the call must stop
	// (SetPoll); it runs on the guest's goroutine.
	poll func() bool
}

// SetPoll sets a function that refill (and Charge, when it crosses the
// floor) asks whether the current call must stop, besides Interrupt and
// the end of the call's context: the host's CPU watchdog reads the thread's
// clock there, so a budget holds even when timers run late. It must be set
// between calls, like Set; nil removes it.
func (m *Meter) SetPoll(f func() bool) { m.poll = f }

// polled reports whether the call must stop by its poll function or by
// its context's deadline having passed (read from the clock, not from
// the context's timer, which a busy scheduler can run late).
func (m *Meter) polled(ctx context.Context) bool {
	if m.poll != nil && m.poll() {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
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

// Exhausted reports whether the host stopped the last call: a trap the
// guest just raised came from the pass (refill, Charge or Check found the
// budget spent, Interrupt called or the call's context done, and raised the
// floor to Spent or Interrupted), not from the guest's own code. It reads
// the floor, not the counter: charged per segment, the counter can be below
// the floor, or below 0, at a trap of the guest's own (see Charge per
// segment), which is not the pass's.
func (m *Meter) Exhausted() bool { return int64(m.limit.Get()) >= Spent }

// OutOfFuel reports whether the host stopped the last call because its
// budget was spent: at the first check (a loop header, a function entry, a
// host function's Charge) at which the guest had been charged more than the
// budget. Remaining is then minus what it was charged beyond the budget, the
// same on every run of the same work: refills only move the floor, at
// points the guest's own checks decide, and no timing enters the count.
func (m *Meter) OutOfFuel() bool { return int64(m.limit.Get()) == Spent }

// Interrupt makes a running guest trap within a Slice of fuel, at its next
// refill. It is safe to call from any goroutine at any time; Set clears it.
func (m *Meter) Interrupt() { m.interrupted.Store(true) }

// Interrupted reports whether Interrupt was called since the last Set.
func (m *Meter) Interrupted() bool { return m.interrupted.Load() }

// ErrInterrupted is the panic value (and so the trap cause) of a host
// function that found its call interrupted: the call's context ended or
// Meter.Interrupt was called.
var ErrInterrupted = errors.New("sandboxd: the call was interrupted")

// ErrExhausted is the panic value of a host function whose charge spent the
// call's fuel budget.
var ErrExhausted = errors.New("sandboxd: the call's fuel budget is spent")

// MeterFrom returns the Meter a call's context carries (Meter.Context), or
// nil for a call into an unmetered module.
func MeterFrom(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}

// Check stops the calling guest when its call was interrupted: a host
// function calls it on entry and before it returns, so an interrupted call
// traps at the next host boundary rather than at the next refill. It panics
// with ErrInterrupted (wazero turns the panic into the call's error) after
// raising the floor above the counter, so Meter.Exhausted reports the trap
// as the pass's. It does nothing for an unmetered call.
func Check(ctx context.Context) {
	if m := MeterFrom(ctx); m != nil {
		m.Check(ctx)
	}
}

// Check is the package's Check for a call on ctx known to be metered by m
// (MeterFrom(ctx) == m): a host function that looked its meter up once
// (Enter) calls it before returning.
func (m *Meter) Check(ctx context.Context) {
	if m.interrupted.Load() || ctx.Err() != nil {
		m.interrupted.Store(true)
		m.limit.Set(uint64(Interrupted))
		panic(ErrInterrupted)
	}
}

// Charge spends units of fuel for work a host function does on the guest's
// behalf (bytes copied, generated or written), after Check. The guest's
// functions keep their count in the global across calls (the pass writes it
// back before every call and reloads it after), so the charge is seen by the
// guest when the host function returns. When the counter drops below the
// floor, Charge does what refill does: lowers the floor while the budget
// lasts, or sets it to Spent and panics with ErrExhausted when it is spent.
// It does nothing for an unmetered call.
func Charge(ctx context.Context, units int64) {
	if m := MeterFrom(ctx); m != nil {
		m.Charge(ctx, units)
	}
}

// Enter is a host function's entry: Charge(ctx, units), returning the
// call's meter (nil for an unmetered call) so that the function checks the
// interrupt before it returns (Meter.Check) without looking it up again.
func Enter(ctx context.Context, units int64) *Meter {
	m := MeterFrom(ctx)
	if m != nil {
		m.Charge(ctx, units)
	}
	return m
}

// Charge is the package's Charge for a call on ctx known to be metered by
// m (MeterFrom(ctx) == m).
func (m *Meter) Charge(ctx context.Context, units int64) {
	m.Check(ctx)
	if units <= 0 {
		return
	}
	f := int64(m.fuel.Get())
	if f < math.MinInt64+units {
		f = math.MinInt64
	} else {
		f -= units
	}
	m.fuel.Set(uint64(f))
	if f >= int64(m.limit.Get()) {
		return
	}
	if m.polled(ctx) {
		m.interrupted.Store(true)
		m.limit.Set(uint64(Interrupted))
		panic(ErrInterrupted)
	}
	if f < 0 {
		// Spent (see refill).
		m.limit.Set(uint64(Spent))
		panic(ErrExhausted)
	}
	m.limit.Set(uint64(max(0, f-Slice)))
}

// TableElemBytes is what the host charges for one table element: wazero
// keeps a table as a Go slice of 8-byte references.
const TableElemBytes = 8

// TableAccount is charged for the table elements an instance holds. The
// instrumented module's table.grow asks the host (through ImportModule)
// before growing: a refusal makes table.grow return -1, as a table at its
// maximum does.
type TableAccount interface {
	// ReserveTable charges elems more elements; false refuses them.
	ReserveTable(elems int64) bool
	// ReleaseTable returns elems elements that were reserved but not added.
	ReleaseTable(elems int64)
}

type tableKey struct{}

// WithTableAccount returns ctx carrying a: every call into an instance
// (instantiation and _initialize included) must use such a context for its
// table growth to be charged; without one, growth is refused.
func WithTableAccount(ctx context.Context, a TableAccount) context.Context {
	return context.WithValue(ctx, tableKey{}, a)
}

// CallContext returns ctx carrying, in one context node, what a call into
// an instance reads from its context: the meter m (Meter.Context; nil: the
// node answers MeterFrom with ctx's), the table account a
// (WithTableAccount; nil: ctx's) and val under the caller's own key (as
// context.WithValue(ctx, key, val); nil key: none). It is the three
// contexts in one allocation instead of three; MeterFrom, TableAccountFrom
// and ctx.Value(key) answer as they would on the chain.
func CallContext(ctx context.Context, m *Meter, a TableAccount, key, val any) context.Context {
	return &callNode{Context: ctx, m: m, a: a, key: key, val: val}
}

// callNode is CallContext's context.
type callNode struct {
	context.Context
	m        *Meter
	a        TableAccount
	key, val any
}

func (n *callNode) Value(k any) any {
	switch k.(type) {
	case meterKey:
		if n.m != nil {
			return n.m
		}
	case tableKey:
		if n.a != nil {
			return n.a
		}
	default:
		if n.key != nil && k == n.key {
			return n.val
		}
	}
	return n.Context.Value(k)
}

// TableAccountFrom returns the TableAccount ctx carries, or nil.
func TableAccountFrom(ctx context.Context) TableAccount {
	a, _ := ctx.Value(tableKey{}).(TableAccount)
	return a
}
