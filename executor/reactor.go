package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
)

// reactorHandler runs a reactor: a module instantiated once per instance
// (its guest runtime initialised then) whose entry export serves a call.
// Which instance serves a call depends on the posture: posture none reuses
// warm instances (idle), context-isolated and strict take never-used or
// recycled ones from a pool (pool, instance.reset).
type reactorHandler struct {
	*toolEnv
	*wasmCode
	idle *warmSet // warm instances (posture none only)
	pool *pool    // pre-warmed never-used instances (context-isolated, strict)
	// grew counts instances whose memory had grown when a reset was tried
	// and could not be put back to its saved size (instance.shrink): past
	// maxGrownResets the tool stops saving snapshots, which a module that
	// grows its memory in every call would then pay for at every
	// instantiation without ever being reset.
	grew atomic.Int32
	// image is the tool's instance image, once an instance made one
	// (keepState); imageMu serialises making it.
	image   atomic.Pointer[state]
	imageMu sync.Mutex
	cloned  atomic.Int64 // instances loaded from the image
}

// maxGrownResets is how many grown instances turn snapshots off for a tool.
const maxGrownResets = 8

// newReactorHandler makes the reactor handler of the tool of t and code,
// and starts its pool.
func newReactorHandler(t *toolEnv, code *wasmCode) *reactorHandler {
	r := &reactorHandler{toolEnv: t, wasmCode: code}
	if t.posture == manifest.PostureNone && t.cfg.idleInstances > 0 {
		r.idle = newWarmSet(t.cfg.idleInstances)
	}
	r.startPool()
	return r
}

func (t *reactorHandler) style() Style { return t.shape.style }

func (t *reactorHandler) close(ctx context.Context) error {
	if !t.stopPool(ctx) {
		return errors.New("executor: a pooled instance of " + t.id + " was still initialising 30 s after the tool closed; its runtime is left open")
	}
	for _, in := range t.idle.drain() {
		_ = in.mod.Close(ctx)
	}
	err := t.runtime.Close(ctx)
	t.closeImage() // after every instance that maps it
	return err
}

// initName names the initialisation step for messages.
func initName(init []initCall) string {
	if len(init) == 0 {
		return abi.ExportInitialize
	}
	return init[len(init)-1].name
}

// instance is one instantiated reactor. Its stdout and stderr are switched
// to the forwarders of the call it serves, so a warm or pooled instance never
// writes into another call's stream.
type instance struct {
	mod            api.Module
	handle         api.Function
	meter          *metering // nil for an unmetered module
	snap           *snapshot // state after initialisation, for recycling (instance.reset); nil if not recyclable
	from           *state    // the tool image it was loaded from or made (keepState); nil if none
	recycled       int       // how many times reset put it back
	reusable       bool      // its last call ended cleanly
	wake           bool      // taken from the pool, which its call refills when over (wakeRefill)
	acct           *limits.Account
	tables         *tableAccount // its tables' elements, charged to acct
	needs          needsKey      // posture none: the key of the calls it serves (warmKey)
	sleep          *sleeper
	stdout, stderr *switchWriter
	// The forwarders of the call it serves when it did not make them
	// itself (callStreams): reset for every call, so that a reused
	// instance's calls allocate none, and one call's at a time.
	callOut, callErr lineForwarder
	vars             *varStore // an Extism plug-in's vars
	// kernel is an Extism plug-in's kernel, renewed by every call
	// (abiExtism.begin) so that its first page is allocated once.
	kernel *extismKernel
	grew   *atomic.Int32 // its handler's count of instances a reset found grown (instance.reset)
	// Config.WithRecordable: the answers that made its current state and
	// the switch its clocks and random source go through (record.go).
	init      []*RecordedCall
	initKnown bool
	sw        *switchTape
}

// newInstance instantiates the reactor and runs _initialize under the tool's
// CPU budget (not charged to any call), or, when the tool has an image and
// the instance gets no env, loads it from the image without running any of
// its code (reactorHandler.clone). Its output goes to stdout/stderr until the instance
// is switched to a call.
func (t *reactorHandler) newInstance(ctx context.Context, env map[string]string, stdout, stderr *lineForwarder) (*instance, error) {
	in, _, err := t.newCallInstance(ctx, env, nil, stdout, stderr)
	return in, err
}

// newCallInstance is newInstance on a call's path: it also says whether
// the instance was loaded from the image or made in full. An instance for
// a recorded or replayed call (tp set) is always made in full, its clocks
// and random source on the tape, and serves only that call.
func (t *reactorHandler) newCallInstance(ctx context.Context, env map[string]string, tp tape, stdout, stderr *lineForwarder) (*instance, Acquisition, error) {
	var img *state
	if len(env) == 0 && tp == nil && t.imageable() {
		img = t.image.Load()
	}
	if img != nil {
		in, err := t.instantiate(ctx, env, img, nil, stdout, stderr)
		if !errors.Is(err, errClone) {
			return in, AcquiredImage, err
		}
	}
	in, err := t.instantiate(ctx, env, nil, tp, stdout, stderr)
	return in, AcquiredInstantiated, err
}

// instantiate makes one instance: from img, or in full when img is nil.
func (t *reactorHandler) instantiate(ctx context.Context, env map[string]string, img *state, tp tape, stdout, stderr *lineForwarder) (*instance, error) {
	in := &instance{acct: limits.NewAccount(t.memLimit), sleep: &sleeper{tape: tp}, stdout: newSwitchWriter(stdout), stderr: newSwitchWriter(stderr)}
	var initRec *Recorder // Config.WithRecordable: what the initialisation draws
	if tp == nil && t.recordable() {
		initRec = NewRecorder(RecordOptions{})
		in.sw = &switchTape{sl: in.sleep}
		in.sw.cur.Store(initRec)
		in.sleep.tape = in.sw
	}
	in.tables = newTableAccount(in.acct)
	mc := t.moduleConfig(env, in.sleep).WithStdout(in.stdout).WithStderr(in.stderr)
	var watch *hostWatch // may this instance be reset to the image?
	if img == nil && len(env) == 0 && tp == nil && t.imageable() {
		watch = &hostWatch{}
	}
	var mod api.Module
	cpu, err, cause := t.guard(ctx, func(gctx context.Context, _ stopper) error {
		gctx, ok := t.initContext(gctx, in.tables) // tables charged, logs capped
		if !ok {
			return errTablesOverMem
		}
		in.sleep.set(0, gctx)
		var err error
		mod, err = t.runtime.InstantiateModule(experimental.WithMemoryAllocator(gctx, in.acct.Allocator()), t.compiled, mc)
		if err != nil {
			return err
		}
		if t.metered {
			if in.meter, err = newMetering(mod); err != nil {
				return err
			}
		}
		if img != nil {
			return t.clone(in, mod, img) // nothing of the module runs
		}
		cctx, done := in.meter.begin(gctx, 0) // instance set-up is not charged
		defer done()
		if watch != nil {
			cctx = context.WithValue(cctx, hostWatchKey{}, watch)
		}
		in.sleep.set(1, cctx)
		if t.dataInit != "" {
			if _, err := mod.ExportedFunction(t.dataInit).Call(cctx); err != nil {
				return err
			}
		}
		if err := runStart(cctx, mod); err != nil {
			return err
		}
		for _, c := range t.shape.init {
			if _, err := mod.ExportedFunction(c.name).Call(cctx, c.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if mod != nil {
			_ = mod.Close(ctx)
		}
		if errors.Is(err, errClone) {
			return nil, err
		}
		stderr.Flush()
		return nil, t.classify(ctx, nil, err, cause, in.acct, cpu, stderr.Tail(), initName(t.shape.init))
	}
	in.mod, in.handle = mod, mod.ExportedFunction(t.shape.entry)
	if in.sw != nil {
		in.sw.cur.Store(nil) // from now on the real clocks and entropy, but during recorded calls
		if img != nil {
			in.init, in.initKnown = img.init, img.initKnown
		} else {
			in.init, in.initKnown = initRec.calls, true
		}
	}
	if img == nil && len(env) == 0 && tp == nil {
		t.keepState(in, watch) // what a reset writes back; the tool's image
	}
	return in, nil
}

func (t *reactorHandler) run(ctx context.Context, inv *invocation, env map[string]string) *runOutcome {
	var stdout, stderr *lineForwarder // the call's streams
	key := t.warmKey(env, inv)        // posture none reuses an instance only for the same needs
	inv.stageStart(StageAcquire)
	var in *instance
	pooledRec := t.pooledRecording(inv) // record.go
	if inv.tape == nil || pooledRec {   // else a recorded or replayed call gets an instance of its own
		in = t.takeInstance(key)
		if in != nil && pooledRec && !in.initKnown {
			t.retire(in)
			in = nil
		}
	}
	var acquired Acquisition
	switch {
	case in == nil:
		var err error
		// An instance made for the call writes its set-up's output to the
		// call's streams, which it keeps as its own between calls.
		stdout = newLineForwarder(t.cfg.guestStdout, t.id, "stdout")
		stderr = newLineForwarder(t.cfg.guestStderr, t.id, "stderr")
		if in, acquired, err = t.newCallInstance(ctx, env, freshTape(inv, pooledRec), stdout, stderr); err != nil {
			inv.stageEnd(StageAcquire, string(AcquiredInstantiated), err)
			return &runOutcome{err: err, acquired: AcquiredInstantiated}
		}
	case t.pool == nil:
		acquired = AcquiredWarm
	case in.recycled > 0:
		acquired = AcquiredRecycled
	default:
		acquired = AcquiredPooled
	}
	inv.stageEnd(StageAcquire, string(acquired), nil)
	if stdout == nil {
		stdout, stderr = in.callStreams(t)
	}
	if in.wake {
		in.wake = false
		defer t.wakeRefill() // once the call is over
	}
	if in.snap != nil && t.pool != nil {
		t.pool.out.Add(1) // back through retire
	}
	in.reusable = false
	in.stdout.Switch(stdout)
	in.stderr.Switch(stderr)
	in.resetAccount() // its tables stay charged
	inv.acct = in.acct
	if pooledRec && in.sw != nil {
		inv.tape.(*Recorder).prependInit(in.init) // the answers that made the state it is in
		in.sw.cur.Store(inv.tape.(*Recorder))
		defer in.sw.cur.Store(nil)
	}
	if !in.acct.Reserve(int64(len(inv.input))) {
		t.retire(in)
		return &runOutcome{err: t.memExceeded(in.acct.Refused(), fmt.Sprintf("the input (%s) does not fit in memMB %d beside the guest's memory", mb(int64(len(inv.input))), t.limits.memMB))}
	}
	var (
		output    []byte
		reusable  bool
		resultErr error
	)
	inv.stageStart(StageGuest)
	cpu, err, cause := t.guard(ctx, func(gctx context.Context, _ stopper) error {
		in.sleep.set(0, gctx)
		cctx, done := in.meter.beginCall(gctx, t.cfg.fuelBudget, in.tables, inv)
		if done != nil {
			defer done()
		}
		in.sleep.set(1, cctx)
		// The guest ABI prepares the call here, under the guard: putting
		// the input where the guest reads it is the call's work too.
		if err := resultStopped(func() { resultErr = t.abi.begin(cctx, t, in, inv) }); err != nil || resultErr != nil {
			return err // resultErr: the call fails with it, the instance retired (not reusable)
		}
		res, err := in.handle.Call(cctx)
		var rc uint32
		if err == nil && len(res) > 0 {
			rc = api.DecodeU32(res[0])
		}
		if err != nil && t.shape.exitOK && exitedOK(err) {
			err = nil // proc_exit(0) ends an Extism call successfully
		}
		if err != nil {
			return err
		}
		// The guest ABI reads its output or failure here, under the guard
		// and the metered context: copying the output out of host memory
		// is the call's work (cpuMs, interrupts), not the host's after it.
		return resultStopped(func() {
			output, reusable, resultErr = t.abi.result(cctx, t, inv, in.acct, rc)
		})
	})
	in.sleep.clear() // the instance keeps nothing of the call's context
	in.stdout.Switch(nil)
	in.stderr.Switch(nil)
	stdout.Flush()
	stderr.Flush()
	out := &inv.outcome
	*out = runOutcome{cpu: cpu, peak: in.acct.Peak(), fuel: in.meter.used(), acquired: acquired}
	switch {
	case err != nil && in.meter.ranOut() && cause == nil:
		out.err = t.fuelExceeded(out.fuel)
	case err != nil:
		out.err = t.classify(ctx, inv, err, cause, in.acct, cpu, stderr.Tail(), t.shape.entry)
	case in.meter.overdrawn():
		out.err = t.fuelExceeded(out.fuel) // the instance is sound, but retired like any failed call's
	default:
		out.output, out.err = output, resultErr
	}
	inv.stageEnd(StageGuest, "", out.err)
	reusable = reusable && !in.mod.IsClosed() && (inv.tape == nil || pooledRec && in.sw != nil)
	in.reusable = reusable
	if t.recycleInline(in) {
		return out
	}
	if reusable && t.putWarm(in, key) {
		return out
	}
	t.retire(in)
	return out
}

// callStreams returns the instance's call forwarders reset for a new call
// of t's. Only the call the instance serves writes to them (its switch
// writers route to them from Switch to Switch(nil)), and run is done with
// them (Flush, Tail) before it gives the instance back.
func (in *instance) callStreams(t *reactorHandler) (stdout, stderr *lineForwarder) {
	in.callOut.reset(t.cfg.guestStdout, t.id, "stdout")
	in.callErr.reset(t.cfg.guestStderr, t.id, "stderr")
	return &in.callOut, &in.callErr
}

// resultStopped runs a guest ABI's result step and returns, as an error, a
// stop it raised the way host functions raise one (wazero turns theirs
// into the call's error): fuel's interrupt or exhaustion, a trap, an
// Extism host failure. classify maps it as it maps the guest's. Any other
// panic is the host's own and goes on.
func resultStopped(fn func()) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		e, ok := p.(error)
		if !ok || !isHostStop(e) {
			panic(p)
		}
		err = e
	}()
	fn()
	return nil
}

// isHostStop reports whether err is a panic value host code raises to stop
// a call.
func isHostStop(err error) bool {
	var ht *hostTrap
	var hf *hostFailure
	return errors.Is(err, fuel.ErrInterrupted) || errors.Is(err, fuel.ErrExhausted) || errors.As(err, &ht) || errors.As(err, &hf)
}
