// Package executor loads tools (manifest → artifact → compiled module → ABI
// check) and invokes them under their sandbox posture and limits, mapping
// every failure to a native error code (package toolerr).
//
// An Executor owns the persistent compilation cache and is shared by all the
// tools it loads; each Tool owns its own wazero runtime, so no two tools —
// and never a strict one — share guest state. Executor and Tool are safe for
// concurrent use by many goroutines: any number of Invoke calls may run on
// one Tool at once, each on its own instance.
//
// # Interrupting guests
//
// Guests are interrupted through fuel metering (internal/fuel) rather than
// wazero's WithCloseOnContextDone, which makes compiled code leave the guest
// at every loop header (13–25× slower on tight loops). The pass instruments
// a module once per tool load (fuel.Cache keeps its output by input digest
// and pass version, in memory and beside the compilation cache, so
// reloading a tool never reruns it); every call gets an unlimited counter,
// and the refill host function stops the guest once the call's context has
// ended — the CPU watchdog, the wall deadline and cancellation all end it.
// Host functions (sandboxd_v1's and WASI's, see hostCallFuel) check the
// interrupt on entry and before returning and charge fuel for the bytes
// they move, so an interrupted guest stops at its next host boundary too.
//
// A module the pass refuses (an opcode it does not know, a name it reserves,
// code it cannot read) is refused at load with handler-shape-invalid: running
// it unmetered would silently drop the fuel budget, Usage.Fuel and the
// interrupt at host boundaries. An operator may opt in with
// Config.WithAllowUnmetered: such a module then runs on a runtime with
// WithCloseOnContextDone, the only place close-on-context-done remains.
//
// # Postures and instances
//
// Posture none keeps warm instances: an instance that served a call cleanly
// serves later calls, and what its guest kept in memory, globals, tables and
// WASI state persists from one call to the next (docs/DESIGN.md: "state may
// persist"). What the host gives an instance is per call, and an instance
// is only ever reused for calls that would give it the same: its WASI
// environment is the declared env of the call it was made for, and the
// guest may have kept the config values and secrets it read. So every warm
// instance is keyed by a digest of the call's declared env, config and
// secrets (needsKey), and a call takes only an instance with its own key;
// calls with other values get an instance of their own. Calls of different
// tenants with equal values may share an instance: posture none is for
// trusted first-party code, and isolation between tenants is what
// context-isolated and strict are for.
//
// A context-isolated or strict call gets an instance no call has used, from
// its tool's pool of pre-instantiated ones when it has one (see pool), or
// a recycled one (context-isolated only, see Recycling).
//
// # Recycling
//
// A context-isolated call gets an instance in exactly the state
// instantiation left it in, without paying for instantiation.
//
// Instantiating a module costs tens of microseconds for a small WAT guest
// and milliseconds for a standard-Go one (its runtime initialises in
// _initialize); unmapping the memory of a used instance costs more than the
// call itself. The pool hides some of it, but a busy tool drains its pool
// faster than a background goroutine can refill it. So, for a module the
// fuel pass found resettable (internal/fuel: it imports nothing but
// functions, changes no table or segment, and every state-changing WASI call
// sets a dirty flag; the pass's verdict, fuel.Verdict, is kept with the
// compiled module, and nothing the module exports has a say), each instance
// saves its state right after instantiation and _initialize — the non-zero
// 4 KiB chunks of its linear memory and the values of its mutable globals —
// and, after a call that ended cleanly, that state is written back and the
// instance returns to the pool (reactorHandler.recycle: on the caller's
// goroutine for a small memory or an empty pool, else on the refill
// goroutine):
//
//   - linear memory: the saved chunks are copied back and everything else is
//     cleared, so every byte is what instantiation left; a memory that grew
//     during the call is first put back to its saved size (instance.shrink:
//     Wasm memory cannot shrink, so the pages past it are discarded, reading
//     as zeros when the guest grows into them again, and wazero's memory is
//     set to the saved size), so memory.size is a fresh instance's too;
//     where that is impossible the instance is closed instead, and a tool
//     that had maxGrownResets such instances stops saving snapshots;
//   - mutable globals: written back through the exports the pass added;
//   - tables and segments: unchanged by construction;
//   - host state: sandboxd_v1 keeps none per instance (it belongs to the
//     call), nor does extism:host/env but an Extism plug-in's vars
//     (varStore), which every context-isolated call starts without; a WASI
//     call that changes any (fd_close, fd_fdstat_set_flags, …) set the
//     dirty flag, and a dirty instance is closed;
//   - an instance that trapped, was interrupted, hit a limit, exited or was
//     closed is never reset.
//
// What the guest can observe is therefore the state a fresh instantiation
// produced, except for one thing: values the guest drew during _initialize
// (random_get, the clocks) are those of this instance's own instantiation,
// so calls served by the same instance see the same ones. Posture strict
// never recycles (every call instantiates anew, or takes a never-used pooled
// instance), nor does a deterministic executor (its clocks and random stream
// live outside the guest), nor an executor configured WithRecycling(false).
//
// # Instance images
//
// A context-isolated or strict call gets a never-used instance without
// paying for _initialize.
//
// A standard-Go guest's _initialize (its runtime's start-up) takes
// milliseconds, and every instance used to run its own. For a module the
// fuel pass found resettable (see Recycling: what a reset writes back —
// linear memory and mutable globals — is all the state an instance has),
// the first instance a tool initialises with no call's data (no env, no
// input) and whose _initialize changed no host state (hostWatch: no
// state-changing WASI call took effect) gives the tool its image: that
// state, its memory held as a sealed memfd (limits.Image) once it is larger
// than imageMapMin. Every later instance of the tool is instantiated
// without running any of its code (no data-segment initialiser, start
// function or _initialize) and loaded from the image: the memory is mapped
// private (copy-on-write) from the memfd, the globals are written. Such an
// instance is in exactly the state the image's instance was in before it
// served any call, so it is as fresh as one that ran _initialize itself,
// with one difference, the one recycled instances already have: the values
// the guest drew during _initialize (random bytes, clock readings) are the
// image's, the same for every instance of the tool. A reset of a mapped
// instance copies back only the pages it wrote (found in the page map by
// limits; discarded instead past limits.KeepPagesMax); clean pages are
// shared by all the tool's instances, so an idle instance holds little
// private memory. The pages the tool's first calls touched are made
// resident in every new instance when it is mapped (state.learn), so its
// call takes no faults on them.
//
// Images are off for deterministic executors (their clocks and randomness
// live outside the guest), for tools with declared env, for modules the
// pass did not find resettable, and with WithInstanceImages(false)
// (`sandboxd serve --instance-images=false`): every instance then runs its
// own _initialize.
//
// # Tables
//
// Tables count against memMB (F05). wazero keeps every table as a Go slice
// of references, host memory the guest makes the process hold, and a module
// may declare many tables. So an instance charges to its limits.Account, like
// its linear memory:
//
//   - at instantiation, the initial elements of all its tables
//     (fuel.Verdict.TableElems), fuel.TableElemBytes each; a refusal fails
//     the instantiation with limits-exceeded memMB;
//   - every table.grow, which the instrumented module asks the host about
//     through the fuel.TableAccount its call's context carries
//     (fuel.WithTableAccount); a refusal makes table.grow return -1, as a
//     table at its maximum does.
//
// Every context an instance's code runs under (instantiation, the start
// function, _initialize, handle) carries its tableAccount. The bytes stay
// charged for the instance's life: a new call on a warm or recycled instance
// starts its Account afresh and charges them again (resetAccount).//
// # Record and replay
//
// A call with Request.Record (or run by Tool.Replay) has a tape (record.go,
// replay.go; format in docs/replay.md). It runs on an instance made for it
// in full — never pooled, warm, recycled or loaded from the image, and
// never kept — whose WASI clocks, sleeps and random source are the tape's
// (sleeper.tape, tapeModuleConfig), so the answers drawn during
// _initialize are on the tape too. The HTTP import of ABI v1 and Extism
// asks invocation.httpDo, which records the exchange around the egress
// session or, in replay, answers it from the recording without a session;
// a replay answers secret_get with the secret's placeholder. Everything
// else a guest reads (input, context, config, env) comes from the call,
// which replay rebuilds from the recording's header. Without a tape each
// hook is a nil check.
//
// A recordable executor (Config.WithRecordable) lets a recorded call of a
// context-isolated or strict tool run on a pooled, recycled or
// image-loaded instance instead: every instance's clocks and random source
// go through a switchTape, which recorded what its initialisation drew
// (instance.init; a state made from it — its snapshot, the tool's image —
// keeps those answers, and an instance reset to or loaded from a state
// takes the state's), and which a recorded call points at its Recorder
// for the call's duration. The recording starts with the instance's
// initialisation answers, so replay on a fresh instance rebuilds the same
// state.
//
// During the call a Recorder only keeps: the tool, the call context, the
// input and output (not copied), the answers as they come. WriteTo makes
// the header and the trailer and encodes them (finalize; the input and
// output written as they are when they are compact JSON, lineWriter), so
// a recording that is dropped — serve --record-failures' successful calls —
// costs the call no encoding (docs/replay.md "Cost").
package executor
