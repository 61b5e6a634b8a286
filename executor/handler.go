package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/httpspec"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// handler runs a tool's calls: one kind per file — an ABI reactor with its
// instances, pool and recycling (reactorHandler), a WASI command
// (commandHandler), a declarative HTTP request (httpHandler). Load chooses it once
// (newHandler); Tool.Invoke validates, resolves the call's needs and hands
// the call to it. A handler is safe for concurrent use.
type handler interface {
	// style is the handler's entry style.
	style() Style
	// run performs one invocation. inv carries the validated input, the
	// context document, config values and secrets; env is the declared WASI
	// environment of the call.
	run(ctx context.Context, inv *invocation, env map[string]string) *runOutcome
	// stats reports the handler's instance counters (Tool.Stats).
	stats() Stats
	// close releases what the handler holds (instances, runtime); calls in
	// flight are stopped.
	close(ctx context.Context) error
}

// toolEnv is what a handler may use of its tool, fixed at Load but for
// closed. A handler embeds it (as Tool does) and reaches nothing else of
// the tool or its executor; host functions reach the call's Tool through
// the invocation.
type toolEnv struct {
	id       string
	posture  manifest.Posture
	limits   toolLimits
	memLimit int64 // bytes
	needs    *needs
	policy   *egress.Policy // the network policy, compiled at load
	cfg      *Config        // the executor's settings; read only
	pooled   *atomic.Int64  // the executor's pooled linear memory (Executor.PooledBytes)
	closed   atomic.Bool    // set by Tool.Close
}

// newHandler chooses and builds t's handler: a declarative HTTP tool when
// spec is set, else the Wasm handler the module's guest ABI recognises
// (selectABI): a WASI command when the shape has no entry export to call,
// else a reactor calling that entry (an Extism _start plug-in is one too:
// it reports style command, and its instance ends with the call).
func (e *Executor) newHandler(ctx context.Context, t *Tool, spec *httpspec.Spec, mod *artifact.Module) (handler, error) {
	if spec != nil {
		return &httpHandler{toolEnv: t.toolEnv, spec: spec}, nil
	}
	code, err := e.compileCode(ctx, t, mod)
	if err != nil {
		return nil, err
	}
	if code.shape.entry == "" { // a WASI command: stdin, stdout, _start
		return &commandHandler{toolEnv: t.toolEnv, wasmCode: code}, nil
	}
	return newReactorHandler(t.toolEnv, code), nil
}

// wasmCode is a tool's compiled module in its own runtime, with the host
// modules of its guest ABI, WASI and the fuel meter.
type wasmCode struct {
	runtime  wazero.Runtime
	compiled wazero.CompiledModule
	abi      guestABI
	shape    moduleShape
	metered  bool         // instrumented with fuel checks (metering); else close-on-context-done
	verdict  fuel.Verdict // the pass's verdict kept with the module (fuel.Cache)
	// dataInit names the export that copies the module's data segments into
	// its memory ("" when instantiation does it): a module whose active
	// segments were made passive (so that an instance cloned from a memory
	// image by reactorHandler.clone skips the copy) runs it right after
	// instantiation.
	dataInit string
	// zeroMem: the module has no active data segment, so an instance's
	// memory is all zero until its own code runs (see instance.load).
	zeroMem bool
}

func (c *wasmCode) code() *wasmCode { return c }

// compileCode bounds, meters and compiles mod for t and checks its shape
// against the guest ABI it speaks.
func (e *Executor) compileCode(ctx context.Context, t *Tool, mod *artifact.Module) (_ *wasmCode, err error) {
	if err := checkCompileBudget(mod.Bytes); err != nil { // F16
		return nil, err
	}
	// Which guest ABI the module speaks is read from its imports; a module
	// whose structure cannot be read is refused after compilation, as it
	// always was (the pass and the compiler name the problem first).
	parsed, perr := wasmbin.Parse(mod.Bytes)
	ga := selectABI(parsed, t.entry)
	// wazero lets table.grow allocate host memory up to 2^32 elements; cap
	// every table so tables alone stay within memMB. The cap is rounded down
	// to a power of two so that tools sharing a module but not a memMB still
	// share its compiled code in most cases (the rewritten bytes are the
	// compilation cache key).
	bin, err := wasmbin.LimitTables(mod.Bytes, tableCap(t.memLimit))
	if err != nil {
		return nil, toolerr.Wrap(toolerr.HandlerShapeInvalid, err, "cannot read the module's tables")
	}
	c := &wasmCode{abi: ga}
	// Meter the module (the package doc's "Interrupting guests"); a module
	// the pass refuses is refused, unless the operator allows unmetered
	// modules (close-on-context-done).
	metered, verdict, ferr, cerr := e.instrumentUntilDone(ctx, bin)
	if cerr != nil {
		return nil, cerr
	}
	if ferr == nil {
		bin, c.metered, c.verdict = metered, true, verdict // fuel.Cache
		bin, c.dataInit = dataSegments(ga, bin)
		c.zeroMem = !wasmbin.HasActiveData(bin) // a fresh instance's memory is all zero
	} else if errors.Is(ferr, fuel.ErrMalformed) {
		// Refused even when unmetered modules are allowed: wazero's decoder
		// allocates whatever a vector count claims (13 bytes claiming 2^32
		// data segments, globals, exports or element segments make it
		// allocate tens of GB and the process dies); the pass checks every
		// count against the bytes left.
		return nil, ferr
	} else if !e.cfg.allowUnmetered {
		return nil, unmeteredRefused(ferr)
	}
	// Every tool gets its own runtime (its own store and host modules); the
	// compilation cache — compiled code only — is shared.
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(!c.metered).
		WithCoreFeatures(api.CoreFeaturesV2)
	c.runtime = wazero.NewRuntimeWithConfig(ctx, rc)
	ownRuntime := true // false once an abandoned compilation owns it (Executor.compile)
	defer func() {
		if err != nil && ownRuntime {
			_ = c.runtime.Close(ctx)
		}
	}()
	if err := instantiateWASI(ctx, c.runtime); err != nil { // metered
		return nil, toolerr.Wrap(toolerr.Internal, err, "instantiate WASI")
	}
	if err := ga.instantiateHost(ctx, c.runtime, t); err != nil {
		return nil, toolerr.Wrap(toolerr.Internal, err, "instantiate the "+ga.name()+" host module")
	}
	if c.metered {
		if _, err := fuel.HostModule(ctx, c.runtime); err != nil {
			return nil, toolerr.Wrap(toolerr.Internal, err, "instantiate the fuel host module")
		}
	}
	var abandoned bool
	if c.compiled, abandoned, err = e.compile(ctx, c.runtime, bin); err != nil { // stops waiting when ctx is done
		ownRuntime = !abandoned
		return nil, err
	}
	if perr != nil {
		return nil, toolerr.New(toolerr.HandlerShapeInvalid, "cannot read module structure: %v", perr)
	}
	if c.shape, err = ga.shape(c.runtime, c.compiled, parsed, t); err != nil {
		return nil, err
	}
	if c.dataInit != "" && c.shape.entry == "" {
		// dataSegments took a command for a reactor: the command handler
		// would run it with its data segments never copied.
		return nil, toolerr.New(toolerr.Internal, "the module's data segments were made passive but it runs as a WASI command")
	}
	if err := checkMinimumMemory(c.compiled, parsed, t.memLimit, t.limits.memMB); err != nil {
		return nil, err
	}
	return c, nil
}

// dataSegments rewrites the data segments of a metered module (the fuel
// pass has turned any start section into an export): a standard Go binary
// has tens of thousands, each an offset wazero evaluates and a record it
// keeps at every instantiation. A module the reactor handler instantiates
// gets them merged and passive, copied by the export it returns, which
// reactorHandler.newInstance calls, so that an instance whose memory comes
// from an image skips the copy; a WASI command (ABI v1 exporting _start:
// the command handler instantiates it and calls _start) gets them merged
// and still active. The result is deterministic, so the rewritten bytes
// stay a good compilation cache key. See wasmbin.PassiveData.
func dataSegments(ga guestABI, bin []byte) ([]byte, string) {
	if _, v1 := ga.(abiV1); v1 && wasmbin.ExportsFunction(bin, abi.ExportStart) {
		return wasmbin.MergeData(bin), ""
	}
	return wasmbin.PassiveData(bin)
}

// runOutcome is what running a guest produced.
type runOutcome struct {
	output   []byte
	cpu      time.Duration
	peak     int64
	fuel     int64
	err      error
	acquired Acquisition // how the call got its instance (trace.go)
}
