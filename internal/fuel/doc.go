// Package fuel owns the metering pass: it decodes a WebAssembly binary, adds
// a fuel counter that every function entry and loop header decrements, and
// re-encodes it, so a host can bound a guest's work deterministically and
// interrupt it cheaply, without wazero's WithCloseOnContextDone.
//
// # The pass
//
// Instrument adds to the module
//
//   - a function import ImportModule.ImportName of type [] -> [] ($refill),
//     after the existing imports, and, for a module that uses table.grow,
//     ImportModule.ReserveName and ReleaseName after it: the module's own
//     functions are renumbered one (or three) up, everywhere they are
//     referenced (calls, ref.func, element segments, global initialisers,
//     exports, the name section);
//   - after the module's own functions, one helper function per bulk or
//     growth instruction and immediates it uses (see Bulk and growth
//     instructions): each such
//     instruction becomes a call of its helper, which checks bounds first,
//     works in chunks of at most 64 KiB with a charge and a check per
//     chunk, and charges fuel in proportion to the bytes or elements;
//   - two mutable i64 globals after every existing global (no global index
//     changes): the counter $fuel, exported as GlobalExport, and its floor
//     $limit, exported as LimitExport.
//
// Each function keeps its count in a new i64 local $d: the fuel left above
// the floor (fuel - limit). At the start of every function body it loads
// $d from the globals, and at the start of every function body and of every
// loop body it inserts the check
//
//	local.get $d; i64.const C; i64.sub; local.tee $d; i64.const 0; i64.lt_s
//	if
//	  save                   ;; at the entry: the parameters (Carrying locals)
//	  local.get $d; global.get $limit; i64.add; global.set $fuel
//	  call $refill
//	  global.get $fuel; global.get $limit; i64.lt_s
//	  if unreachable end
//	  global.get $fuel; global.get $limit; i64.sub; local.set $d
//	  restore
//	end
//
// A loop whose block type takes no parameters is versioned instead (see
// Loop versioning): its check branches out of the loop to a refill path
// after it, so that the call of $refill is not inside the loop.
//
// A function with no loop and no call (a leaf) has no check: see Leaf
// functions.
//
// Before every call and every way out of the function (return, a branch to
// the function's label, its final end) it writes $fuel = $d + $limit, and
// after every call it reloads $d, since the callee spent from the global.
// A loop that calls nothing therefore keeps its count in a register: its
// check is a subtraction, a comparison and a branch, with no store and
// reload of a global per iteration (which cost up to 2x on tight loops in
// pass versions before 4, which kept the count in the global). The global
// is exact wherever the host reads it: in refill, after a call into the
// guest returns, after a fuel trap. After a trap the guest raised itself
// (out-of-bounds access, division by zero, its own unreachable) it misses
// what the trapping function spent since its last write, so the fuel
// reported for such a failed call can be lower than the work done; budgets
// are unaffected (the call ends there). A function that contains a
// try_table keeps the count in the global only, with the check
//
//	global.get $fuel; i64.const C; i64.sub; global.set $fuel
//	global.get $fuel; global.get $limit; i64.lt_s
//	if
//	  call $refill
//	  global.get $fuel; global.get $limit; i64.lt_s
//	  if unreachable end
//	end
//
// because a caught exception would reach its handler without the reload.
//
// # Loop versioning
//
// In a function that keeps its count in a local, a loop whose block type
// has no parameters (empty or one result type)
//
//	loop bt
//	  body
//	end
//
// becomes
//
//	block bt                     ;; $exit
//	  loop bt                    ;; $outer
//	    block                    ;; $refill
//	      loop bt                ;; the loop itself
//	        local.get $d; i64.const C; i64.sub; local.tee $d
//	        i64.const 0; i64.lt_s
//	        br_if $refill
//	        body                 ;; depths of labels outside the loop + 3
//	      end
//	      br $exit
//	    end
//	    save                 ;; the locals the loop sets (Carrying locals)
//	    local.get $d; global.get $limit; i64.add; global.set $fuel
//	    call $refill
//	    global.get $fuel; global.get $limit; i64.lt_s
//	    if unreachable end
//	    global.get $fuel; global.get $limit; i64.sub
//	    i64.const C; i64.add; local.set $d
//	    restore
//	    br $outer
//	  end
//	end
//
// It spends the same fuel and checks at the same points as the plain check
// (appendLocal): every iteration passes the subtraction and the comparison;
// when the count drops below zero the refill path syncs the global, calls
// $refill, traps or reloads the count, and re-enters the loop through its
// header with C added back, so that the header's subtraction leaves exactly
// what the plain check leaves after a refill (at least 0: it never branches
// to $refill twice in a row). What changes is only where the call sits: in
// the plain form it is inside the loop, on a path from the header to the
// body, and wazero's register allocator (wazevo), which starts each block
// from one predecessor's register state, keeps the loop's values in stack
// slots on the hot path after it (a Go function is one dispatch loop, so
// each of its locals paid a load and a store per iteration); versioned, the
// call is in the outer loop, which the hot path never enters.
//
// Even so, the register allocator stores a value that is live across a
// call to its stack slot where the value is defined, and for a value the
// loop carries (a local it sets: a parameter of the header's block) that
// is on every branch back to the header; so the refill path carries those
// locals across its call itself (see Carrying locals across refill).
//
// The body's branches to labels outside the loop get their depths raised
// by 3 for each versioned loop they leave (shiftBranch); branches to the
// loop itself (continue) and to frames inside it are unchanged. So no
// instruction of the module names $exit, $outer or $refill: only the
// check's br_if enters the refill path, after paying C. That matters: the
// refill path adds C back, and a branch that reached it without paying
// (a wrong shift) would make a loop that spends nothing
// (TestLoopVersioningDifferential and TestLoopVersioningKeepsFuel catch
// one). A loop with parameters (a type-index block type) keeps the plain
// check: br_if $refill would drop its parameters. So does every loop of a function that
// keeps its count in the global (one with a try_table, whose catch clauses
// name labels too).
//
// # Carrying locals across refill
//
// Since pass version 10. In a function that keeps its count in a local,
// the refill path of the entry's check carries the function's parameters
// (when it has at most 16), and the refill path of a versioned loop every
// local that the loop's body sets (in nested loops too), across the call
// of $refill on the operand stack: save pushes, for each such local of a
// number or vector type in order, a new value of its bits, at least 64
// wide,
//
//	i32: local.get $l; i64.extend_i32_u
//	i64: local.get $l; i64.const 0; i64.or
//	f32: local.get $l; i32.reinterpret_f32; i64.extend_i32_u
//	f64: local.get $l; local.get $l; f64.copysign
//	v128: local.get $l; local.get $l; v128.or
//
// and restore, after the reload of $d, pops them back, the last first
// (i32.wrap_i64, then f32.reinterpret_i32 for an f32; local.set $l). No
// operation is arithmetic, so every bit is kept (no NaN is quieted:
// TestRefillCarriesLocals); a local of a reference type is not carried.
// They cost no fuel (a refill path has no charge) and change no value.
//
// They are for wazero's register allocator (wazevo), which stores a value
// live across a call to its stack slot where the value is defined: a
// parameter at the function's entry, a local a loop sets on every branch
// back to the loop's header (it is a parameter of the header's block).
// With save and restore what is live across the call is the pushed values,
// defined and stored on the refill path only, and the hot path stores
// nothing for it. Before version 10 a Go dispatch loop stored every local
// it set on every iteration (the closure shape of BenchmarkGoLoopShapes ran
// 1.5x plain), and every function stored its parameters at its entry. The
// values are 64 bits wide because wazevo gives a 32-bit value a 4-byte
// slot, after which every 8-byte slot is misaligned; a Go function's i32
// parameter, stored at the entry first, misaligned all the others, and a
// misaligned store that crosses a cache line is slow: with 4-byte slots
// the range slice shape ran 1.2x or 1.5x plain as the frame's size
// changed, which it no longer does. The locals carried in all of a function's loops are at most a
// quarter of its body's size in number: the loops past that bound (in the
// order their ends come) carry none.
//
// # Charge per segment
//
// Since pass version 9. A level's code is cut into segments at the points
// control can reach other than from the instruction before: the level's
// header, and the end of every block, if and try_table in it (the target
// of a branch or a catch, and an if's false path). The header's check pays
// the first segment; every other segment with a cost is paid where it
// starts, after that end, by a charge without a comparison:
//
//	local.get $d; i64.const S; i64.sub; local.set $d
//
// (global.get $fuel; i64.const S; i64.sub; global.set $fuel in a function
// that keeps its count in the global). An if's two arms are in the segment
// of the if, so both are paid. The count can so drop below zero between two
// checks, by the segments run since the last one (a function returning to
// its caller carries its deficit there, through the sync before the return);
// the next check (a loop header or a function entry: every backward jump
// and every call passes one; a host function's Charge is one too) sees it.
// For the host that means:
//
//   - The budget trap comes at the first check at which the guest has been
//     charged more than its budget, and the counter then holds exactly what
//     it was charged: charges sit at fixed points of the code, refill only
//     moves the floor (to at most a Slice below the counter, never below
//     0), at the checks that find the count below it, so every check before
//     that one found the counter at least 0, and no clock, interrupt
//     timing or garbage collection enters the count. Given the same work
//     (a guest that reads no clock, or runs under deterministic clocks and
//     randomness), the fuel reported at the trap is the same on every run.
//   - A trap of the guest's own, or in a host function, can come after a
//     sync that left the counter below the floor (or below 0): it is not the
//     pass's. So the host says why it stopped a call in the floor (Spent or
//     Interrupted), and Meter.Exhausted and Meter.OutOfFuel read that, not
//     the counter (TestChargeDeficit).
//   - A call can return normally having been charged more than its budget
//     (Remaining below 0) with no check left on its way out: the end of the
//     call is the host's last check (the executor fails such a call as out
//     of fuel).
//
// Before version 9 the check paid the whole level: a Go function is one
// dispatch loop whose every jump goes back to its header through a
// br_table, so each basic block executed paid for every block of the
// function (a Go map iteration paid about 29,000 units per element, now
// about 650), and refill, a few microseconds per call, ran that much more
// often (BenchmarkGoLoopShapes).
//
// # Leaf functions
//
// Since pass version 11. A function that keeps its count in a local and
// has no loop and no call of any kind (call, return_call, call_indirect,
// return_call_indirect, nor a bulk or growth instruction, which becomes a
// call of its helper) runs each of its instructions at most once per call,
// so it needs no check of its own: the next check after it (its caller's
// next loop header or function entry; for a call from the host, the end of
// the call) sees what it spent, as after a charge. Its local holds the
// counter itself, not the fuel above the floor:
//
//	global.get $fuel; i64.const C; i64.sub; local.set $d   ;; the entry
//	local.get $d; i64.const S; i64.sub; local.set $d       ;; each later segment
//	local.get $d; global.set $fuel                         ;; every way out
//
// It is charged exactly what the entry check and the syncs through the floor
// charged (TestLeavesKeepFuel), with no load of the floor, no comparison and
// no refill path at the entry: a loop that calls a small leaf once per
// iteration ran 1.5-1.7x plain with them and 1.1-1.3x without
// (BenchmarkLeafCall). What changes is where a budget that runs out inside
// a leaf stops the guest: at the next check after the leaf instead of at
// its entry (with the leaf's cost charged), or, when the host called the
// leaf directly, at the end of the call, which returns overdrawn.
//
// # Decoding exactly as wazero does
//
// The instruction stream wazero executes must be the one the pass metered
// (F12: a stream the two read differently hid a loop and a table.set). The
// pass reads with wasmbin's Reader and wasmbin.ScanExpr, the one reader
// sandboxd has (the compile budget reads with it too), under
// wasmbin.Refuse: every instruction as wazero v1.12's validator and wazevo
// frontend read it, and a module refused where they could read it
// differently from the spec: the sub-opcode after 0xfd and 0xfe is one byte (a 0xfd
// sub-opcode of 0x80 or more is accepted only followed by 0x01, its spec
// encoding, which wazero reads as a nop); the sub-opcode after 0xfc must
// be its minimal one-byte LEB128; the reserved memory index of
// memory.size, memory.grow, memory.fill, memory.copy and memory.init must
// be the single byte 0x00; a memarg is an alignment u32 below 32 (wazero has
// no multi-memory) and a u32 offset; select's type count is the byte 0x01.
// Other LEB128 immediates may be padded (Go's linker pads them): both
// decoders end a LEB128 at its first byte without the continuation bit and
// refuse the same over-long ones, so they read the same length. The reset
// analysis reads the same stream.
//
// Every export name beginning with ReservedPrefix ("sandboxd.") is refused
// in the input, resettable or not, and so is any import from ImportModule.
//
// The pass refuses a module whose code names a global or local index that
// does not exist (an invalid module, which wazero would refuse anyway):
// after the pass adds its own globals and local, such an index would name
// the counter, the floor or the dirty flag and let the guest refill itself.
//
// The pass also prepares instance reset (see Instance reset): for a module it finds
// resettable it exports every mutable global and a dirty flag that calls of
// state-changing WASI imports set.
//
// C is the static cost of the first segment of that function or loop level
// (see Charge per segment): the weights of its instructions, not counting
// block, loop, else, end and nop, and not counting the bodies of loops
// nested in it (they pay at their own header). An instruction weighs 1, except integer
// division and remainder (3), float division and square root (2),
// call_indirect (4) and SIMD division and square root (4), so that a Slice
// is about a millisecond of work whatever the mix (TestSliceTime). C is at
// least 1. Each segment's instructions run at most once per pass through
// its check or charge, so the fuel charged is never less than the instructions executed,
// and it is the same on every machine. Every backward jump goes through a
// loop header and every call through a function entry, so the work between
// two checks is bounded by the size of one function body: the bulk
// instructions run in checked chunks (see Bulk and growth instructions), and host functions call
// Check and Charge. memory.grow and table.grow are single operations
// (charged per page or element; bounded by memMB and the TableAccount).
//
// A Wasm start function would run inside instantiation, before the host
// could set the counter, so Instrument removes the start section and exports
// the start function as StartExport; the host calls it after instantiating.
//
// # Bulk and growth instructions
//
// Cost follows work (pass version 5; version 6 charges one unit per byte).
//
// The bulk instructions (memory.fill, memory.copy, memory.init, table.fill,
// table.copy, table.init) and the growth instructions (memory.grow,
// table.grow) do work proportional to an operand, so one such instruction
// cannot cost one unit. The pass replaces each of them by a call of a
// helper function it adds to the module (one per instruction and
// immediates), which
//
//   - checks the bounds of the whole operation first: when it is out of
//     bounds the helper executes the original instruction with its
//     original operands, which traps with wazero's own trap and writes
//     nothing; a passive segment is probed with a zero-length
//     memory.init/table.init at its end (a dropped segment has length 0);
//   - then does the operation in chunks of BulkChunkBytes bytes
//     (BulkChunkElems table elements), and before each chunk charges its
//     cost to the counter and checks it as a function entry does, so the
//     guest refills (and so observes an interrupt, a deadline or a GC)
//     between chunks, never after more than a chunk of work;
//   - keeps the instruction's semantics: memory.copy and table.copy copy
//     backwards when the destination is above the source (memmove).
//
// The rates: BulkByteShift (memory.fill), BulkCopyShift (memory.copy and
// memory.init: a read and a write per byte), one unit per table element for
// the table instructions, MemoryPageCost per page that memory.grow added
// (charged after a growth that succeeded: wazero zeroes and copies the
// memory in Go) and one unit per element for table.grow (charged before).
//
// table.grow also asks the host first: the pass adds the imports
// ImportModule.ReserveName (i32) -> i32 and ImportModule.ReleaseName
// (i32) -> [] (HostModule provides them; they call the TableAccount of the
// call's context, and refuse growth without one), and the helper returns -1
// without growing when the host refuses, or when the growth would pass the
// table's declared maximum (so a growth that the account would allow but
// wazero refuses is released).
//
// # Instance reset
//
// Since pass version 3.
//
// A host that gives every call a fresh instance can instead put a used
// instance back into the state its instantiation produced, if it can restore
// every piece of state the guest can change: linear memory (contents and
// size), mutable globals, tables, dropped segments, and whatever the host
// keeps per instance. The pass decides statically whether that is possible
// and, when it is, makes the state reachable from the host:
//
//   - every defined mutable global is exported as GlobalSnapshotExport
//     followed by its position among them (sandboxd.g0, sandboxd.g1, …), so
//     the host can read it after instantiation and write it back;
//   - a mutable i32 global, exported as DirtyExport, is set to 1 before every
//     direct call of an imported function that changes host-side state (a
//     WASI function outside statelessWASI): a host finding it set after a
//     call must discard the instance instead of resetting it.
//
// A module is resettable when it imports nothing but functions; all of its
// mutable globals hold numbers (i32, i64, f32, f64); no code changes a table
// or drops a segment (table.set, table.grow, table.fill, table.copy,
// table.init, elem.drop, data.drop); its imports come from
// wasi_snapshot_preview1, HostStatelessModule, ExtismStatelessModule or
// ImportModule; and every use
// of a state-changing import is a direct call (never return_call, ref.func,
// an element segment or an export), so that the dirty flag sees every one.
// Memory growth is not decided statically: the host compares the size after
// a call with the size it saved.
//
// # Host side
//
// HostModule provides $refill. The host sets a budget with Meter.Set, which
// puts the floor a Slice below the counter (never below 0). When a check
// finds the counter below the floor the guest calls $refill, which lowers
// the floor to a Slice below the counter (never below 0), or raises it
// above the counter, so that the guest traps ("unreachable"): to Spent when
// the budget is spent (the counter is negative), to Interrupted when
// Meter.Interrupt was called or the context the guest was called with has
// ended (a deadline, a cancellation: nothing needs to watch the context).
// A trap after which the floor is one of these (Meter.Exhausted; Spent:
// Meter.OutOfFuel) came from the pass, not from the guest's own code.
//
// The call into Go once per Slice matters beyond interrupts: Go cannot
// preempt a goroutine while it runs wazero's compiled code (the preemption
// signal finds no Go function at the interrupted address), so a guest that
// spun without ever leaving compiled code would hold its thread and make a
// garbage collection's stop-the-world, and so every goroutine of the
// process, wait for it. wazero's WithCloseOnContextDone avoids that by
// leaving compiled code at every loop header, which is what makes it slow;
// the pass leaves it once per Slice.
//
// Version changes whenever the output of Instrument for a given input can
// change; callers key caches of instrumented modules on it.
package fuel
