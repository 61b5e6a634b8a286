// Package fuel owns the metering pass: it decodes a WebAssembly binary,
// adds a fuel counter that every function entry and loop header decrements
// (trapping when it goes negative), and re-encodes it, so a host can bound a
// guest's work deterministically and interrupt it by making the counter
// negative from another goroutine.
//
// # The pass
//
// Instrument appends two mutable i64 globals after every existing global (so
// no global, function, table or local index changes): the counter $fuel,
// exported as GlobalExport, and its floor $limit, exported as LimitExport.
// At the start of every function body and of every loop body it inserts
//
//	global.get $fuel; i64.const C; i64.sub; global.set $fuel
//	global.get $fuel; global.get $limit; i64.lt_s; if unreachable end
//
// where C is the static cost of the code that belongs to that function or
// loop level: the number of instructions in its body, not counting block,
// loop, else, end and nop, and not counting the bodies of loops nested in
// it (they pay at their own header). C is at least 1. Because each level's
// instructions run at most once per pass through its check, the fuel charged
// is never less than the instructions executed; because every backward jump
// goes through a loop header and every call through a function entry, the
// work between two checks is bounded by the size of one function body, so a
// floor raised from outside is noticed within that bound (bulk memory
// instructions and host calls excepted: they run to completion). The guest
// only ever writes $fuel and the host interrupts by writing $limit, so an
// interrupt cannot be lost to the guest's read-modify-write of the counter.
// wazero's compiler loads a global at every global.get that does not
// follow a global.set of it in the same straight-line code, so each check
// reads $limit afresh (TestInterruptSpinningGuest proves it).
//
// A Wasm start function would run inside instantiation, before the host
// could set the counter, so Instrument removes the start section and exports
// the start function as StartExport; the host calls it after instantiating.
//
// # Host side
//
// The counter starts at Unlimited and the floor at 0. Meter reads and writes
// them through wazero's api.MutableGlobal; Meter.Interrupt raises the floor
// to Interrupted so the guest traps ("unreachable") at its next check. A trap
// with the counter below the floor is fuel exhaustion or an interrupt, never
// the guest's own unreachable.
//
// # Go's scheduler
//
// Go cannot preempt a goroutine while it runs wazero's compiled code (the
// preemption signal finds no Go function at the interrupted address). The
// checks never leave compiled code, so a guest that spins without calling
// the host holds its thread, and a garbage collection that starts meanwhile
// waits for it at stop-the-world, stopping every other goroutine of the
// process, including one that would call Interrupt. wazero's
// WithCloseOnContextDone avoids this by leaving compiled code at every loop
// header, which is what makes it slow. A host that runs instrumented guests
// without it must give them a periodic exit to Go: the next pass version
// calls an imported host function whenever the counter drops below the
// floor and has the host lower the floor by a time slice (see the
// integration notes); until then, only guests that call the host regularly,
// or a process that does not collect garbage while they spin, are safe
// without close-on-context-done.
//
// Version changes whenever the output of Instrument for a given input can
// change; callers key caches of instrumented modules on it.
package fuel
