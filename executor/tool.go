package executor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Tool is a loaded tool. It is safe for concurrent use; Close it when done.
// What runs a call is its handler (handler.go), chosen once at load: an
// ABI reactor, a WASI command or a declarative HTTP request; everything
// else here is the same for every kind.
type Tool struct {
	exec     *Executor
	m        *manifest.Tool
	posture  manifest.Posture
	limits   toolLimits
	memLimit int64 // bytes
	needs    *needs
	digest   string
	source   string

	// secretNames are the secrets a call may hand this tool and its egress
	// may substitute: needsSpec.secrets, plus a declarative HTTP tool's
	// spec.authorization secretRef.
	secretNames map[string]bool
	policy      *egress.Policy // the network policy, compiled at load
	entry       string         // the export a modulePath #NAME suffix names, "" for none

	h      handler
	closed atomic.Bool
	calls  callGate // callgate.go: Close waits for running calls
}

// ID returns the tool id.
func (t *Tool) ID() string { return t.m.ID }

// Manifest returns the parsed manifest. Callers must not modify it.
func (t *Tool) Manifest() *manifest.Manifest { return t.m.Manifest }

// Digest returns the module's "sha256:…" digest.
func (t *Tool) Digest() string { return t.digest }

// Style returns the handler's entry style.
func (t *Tool) Style() Style { return t.h.style() }

// Posture returns the effective sandbox posture.
func (t *Tool) Posture() manifest.Posture { return t.posture }

// Limits returns the effective memMB and cpuMs.
func (t *Tool) Limits() (memMB, cpuMs int64) { return t.limits.memMB, t.limits.cpuMs }

// Close releases the tool's runtime and warm instances. Calls in flight are
// stopped (their context is canceled) and Close waits for them to end
// before it frees what their guests run on. If ctx ends first, Close
// returns ctx's error and the last call to end releases the runtime.
func (t *Tool) Close(ctx context.Context) error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	t.exec.unregister(t)
	idle := t.calls.shut()
	select {
	case <-idle:
	case <-ctx.Done():
		go func() {
			<-idle
			_ = t.h.close(context.Background())
		}()
		return ctx.Err()
	}
	return t.h.close(ctx)
}

// CallContext is the caller's context for one call (pack protocol `ctx`;
// the JSON tags are its field names).
// Only values the manifest declares in needsSpec reach the guest.
type CallContext struct {
	TenantID       string                     `json:"tenantId,omitempty"`
	RunID          string                     `json:"runId,omitempty"`
	RequestID      string                     `json:"requestId,omitempty"`
	ProjectID      string                     `json:"projectId,omitempty"`
	OrgID          string                     `json:"orgId,omitempty"`
	IdempotencyKey string                     `json:"idempotencyKey,omitempty"`
	Settings       json.RawMessage            `json:"settings,omitempty"`
	Env            map[string]string          `json:"env,omitempty"`
	Config         map[string]json.RawMessage `json:"config,omitempty"`
	Secrets        map[string]string          `json:"secrets,omitempty"`
}

// WithDefaults returns cc with tenantID and runID filled in where cc leaves
// them empty (a local runner's or a test harness's stand-ins).
func (cc CallContext) WithDefaults(tenantID, runID string) CallContext {
	if cc.TenantID == "" {
		cc.TenantID = tenantID
	}
	if cc.RunID == "" {
		cc.RunID = runID
	}
	return cc
}

// Request is one invocation.
type Request struct {
	// CallID identifies the call in lifecycle events (toolCallId); empty
	// means a new random id.
	CallID string
	// Input is the tool input, one JSON value.
	Input []byte
	// Context is the call context.
	Context CallContext

	validated json.RawMessage // set once the input validated
}

// Usage is what one call consumed.
type Usage struct {
	CPUMs     float64 `json:"cpuMs"`
	WallMs    float64 `json:"wallMs"`
	PeakMemMB float64 `json:"peakMemMB"`
	// Fuel is the work the guest did, in fuel units (about one per Wasm
	// instruction, the same on every machine); omitted for a module the
	// metering pass could not instrument and for declarative HTTP tools.
	Fuel int64 `json:"fuel,omitempty"`
}

// Result is a call's output and usage.
type Result struct {
	// Output is the validated output JSON.
	Output json.RawMessage
	Usage  Usage
	// Egress is the audit trail of the call's HTTP requests, allowed or
	// denied (rule, host, reason, bytes); nil when it made none. It never
	// holds query strings, header values or secrets.
	Egress []egress.Attempt
}

// Invoke runs one call: it validates the input (filling defaults), runs the
// guest on an instance chosen by the posture under the tool's limits and the
// context's deadline (DefaultTimeout when it has none), and validates the
// output. On failure the error is a *toolerr.Error; the Result is still
// returned with the usage when the guest ran, and is nil otherwise.
func (t *Tool) Invoke(ctx context.Context, req Request) (*Result, error) {
	if t.exec.cfg.observer != nil {
		return t.invokeObserved(ctx, req)
	}
	// Without an observer nothing keeps req: it stays on the stack.
	start := time.Now()
	res, err := t.invoke(ctx, &req, nil)
	return t.finish(res, err, start)
}

// invokeObserved is Invoke with the lifecycle events.
func (t *Tool) invokeObserved(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	if req.CallID == "" {
		req.CallID = NewCallID()
	}
	t.observe(CallEvent{Phase: PhasePending, CallID: req.CallID, Context: &req.Context})
	res, err := t.invoke(ctx, &req, &req.Context)
	res, err = t.finish(res, err, start)
	if err != nil {
		t.observe(CallEvent{Phase: PhaseFailed, CallID: req.CallID, Context: &req.Context, Input: req.validated, Result: res, Err: err})
		return res, err
	}
	t.observe(CallEvent{Phase: PhaseCompleted, CallID: req.CallID, Context: &req.Context, Input: req.validated, Result: res})
	return res, nil
}

// finish sets the call's wall time and names the tool in its error.
func (t *Tool) finish(res *Result, err error, start time.Time) (*Result, error) {
	if res != nil {
		res.Usage.WallMs = round3(float64(time.Since(start)) / float64(time.Millisecond))
	}
	if err != nil {
		return res, toolerr.As(err).WithTool(t.ID())
	}
	return res, nil
}

// invoke runs the call of req; observed is the context the observer's
// events carry (nil: no observer).
func (t *Tool) invoke(ctx context.Context, req *Request, observed *CallContext) (*Result, error) {
	// The call's context (callctx.go): ended by ctx, by Close and by the
	// default timeout when ctx sets no deadline.
	c, ok := t.calls.enter(ctx, t.exec.cfg.defaultTimeout)
	if !ok || t.closed.Load() {
		if ok {
			c.release()
		}
		return nil, toolerr.New(toolerr.Internal, "tool %s is closed", t.ID())
	}
	defer c.release()
	if err := c.Err(); err != nil {
		return nil, toolerr.As(err)
	}
	// Validation is metered like guest work (validate.go; G01).
	input, vcpu, err := t.validateInput(c, req.Input)
	if err != nil {
		return nil, err
	}
	req.validated = input
	if observed != nil {
		t.observe(CallEvent{Phase: PhaseInProgress, CallID: req.CallID, Context: observed, Input: input})
	}
	env, cfgValues, ncpu, err := t.resolveNeedsMetered(c, &req.Context)
	if err != nil {
		return nil, err
	}
	vcpu += ncpu
	// The context document is made when the guest first reads it
	// (invocation.contextDoc): most calls never do.
	inv := &invocation{tool: t, input: input, cc: req.Context, env: env, config: cfgValues, secrets: t.declaredSecrets(req.Context.Secrets)}
	if err := inv.checkSecrets(); err != nil { // egress.go: before any guest starts
		return nil, err
	}
	out := t.h.run(c, inv, env)
	res := &Result{Usage: Usage{CPUMs: cpuMs(out.cpu + vcpu), PeakMemMB: round2(float64(out.peak) / limits.MiB), Fuel: out.fuel}}
	res.Egress = inv.egressAttempts() // egress.go
	if out.err != nil {
		return res, out.err
	}
	output, ocpu, err := t.validateOutput(c, out.output, max(t.limits.memMB*limits.MiB-out.peak, 1), out.cpu) // the memMB headroom left (F18)
	res.Usage.CPUMs = cpuMs(out.cpu + vcpu + ocpu)
	if err != nil {
		return res, err
	}
	if err := c.Err(); err != nil {
		return res, toolerr.As(err) // never a result after the deadline
	}
	res.Output = output
	return res, nil
}

func (t *Tool) declaredSecrets(given map[string]string) map[string]string {
	if len(t.secretNames) == 0 || len(given) == 0 {
		return nil // read only (egress.go, needs.go): nil reads as empty
	}
	out := make(map[string]string, len(t.secretNames))
	for name := range t.secretNames {
		if v, ok := given[name]; ok {
			out[name] = v
		}
	}
	return out
}

func contextJSON(cc *CallContext, env map[string]string) []byte {
	type ctxDoc struct {
		TenantID       string            `json:"tenantId"`
		RunID          string            `json:"runId"`
		RequestID      string            `json:"requestId,omitempty"`
		ProjectID      string            `json:"projectId,omitempty"`
		OrgID          string            `json:"orgId,omitempty"`
		IdempotencyKey string            `json:"idempotencyKey,omitempty"`
		Settings       json.RawMessage   `json:"settings,omitempty"`
		Env            map[string]string `json:"env"`
	}
	settings := validRaw(cc.Settings)
	if b, ok := appendContextJSON(nil, cc, settings, env); ok {
		return b
	}
	b, _ := json.Marshal(ctxDoc{cc.TenantID, cc.RunID, cc.RequestID, cc.ProjectID, cc.OrgID, cc.IdempotencyKey, settings, env})
	return b
}

func validRaw(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || !json.Valid(r) {
		return nil
	}
	return r
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// runOutcome is what running a guest produced.
type runOutcome struct {
	output []byte
	cpu    time.Duration
	peak   int64
	fuel   int64
	err    error
}

// errCPUExceeded is the cancellation cause the CPU watchdog uses.
var errCPUExceeded = errors.New("cpu budget exceeded")

// errOutputCap is the cancellation cause when a command's stdout passes memMB.
var errOutputCap = errors.New("output over memory budget")

// guard runs fn on a locked OS thread under the CPU watchdog and a context
// that is cancelled (with a cause) when the budget is spent. fn gets the
// guarded context and its cancel function.
func (t *Tool) guard(ctx context.Context, fn func(ctx context.Context, cancel context.CancelCauseFunc) error) (cpu time.Duration, err error, cause error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	budget := time.Duration(t.limits.cpuMs) * time.Millisecond
	if c, ok := ctx.(*callCtx); ok && c.guarded.CompareAndSwap(false, true) {
		// A call's own context (callctx.go) is the guarded one: the
		// watchdog and fn's cancel end the call, which is what ending a
		// context derived for the guard came to (the call fails with what
		// classify makes of the cause), without deriving one. The
		// watchdog comes from a free list; it holds nothing of the call
		// once released.
		wd := limits.AcquireWatchdog(limits.CurrentThread(), budget, c)
		c.wd.Store(wd)
		err = fn(c, c.cancelCause)
		cpu, _ = wd.Stop()
		c.wd.Store(nil)
		wd.Release()
		c.guarded.Store(false)
		return cpu, err, c.causeErr()
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := limits.StartWatchdog(limits.CurrentThread(), budget, func(time.Duration) { cancel(errCPUExceeded) })
	// The fuel meter also asks the watchdog at every refill (fuel.go), so
	// the budget holds even when the watchdog's timer runs late.
	err = fn(context.WithValue(gctx, watchdogKey{}, wd), cancel)
	cpu, _ = wd.Stop()
	return cpu, err, context.Cause(gctx)
}

// sleeper makes WASI sleeps interruptible by the current call's context,
// and charges random_get to it (wasi.go). ctx is the context the instance's
// guest code currently runs under (the metered one once it is metered).
type sleeper struct {
	ctx atomic.Pointer[context.Context]
}

func (s *sleeper) sleep(ns int64) {
	var done <-chan struct{}
	if c := s.ctx.Load(); c != nil {
		done = (*c).Done()
	}
	tm := time.NewTimer(time.Duration(ns))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-done:
	}
}

func (t *Tool) moduleConfig(env map[string]string, sl *sleeper) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(t.ID()).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(sl.sleep).
		WithRandSource(sl.rand(rand.Reader)). // wasi.go: charged per chunk
		WithStartFunctions()
	for k, v := range env {
		mc = mc.WithEnv(k, v)
	}
	return t.exec.deterministicModuleConfig(mc, sl) // deterministic.go
}

// handlerFailure maps a non-zero return from handle.
func (t *Tool) handlerFailure(inv *invocation, acct *limits.Account, rc int32) error {
	if r := acct.Refused(); r > 0 {
		return t.memExceeded(r, fmt.Sprintf("handler failed (returned %d) after its memory use reached the memMB cap", rc))
	}
	if err := inv.declaredFailure(fmt.Sprintf("handler returned %d", rc)); err != nil {
		err.Details["returned"] = rc
		return err
	}
	return &toolerr.Error{Code: toolerr.HandlerError, Message: fmt.Sprintf("handler returned %d", rc), Details: map[string]any{"returned": rc}}
}

// declaredFailure returns the handler-error the guest declared with
// error_set, or nil if it declared none.
func (inv *invocation) declaredFailure(fallback string) *toolerr.Error {
	inv.mu.Lock()
	d := inv.declared
	inv.mu.Unlock()
	if d == nil {
		return nil
	}
	e := &toolerr.Error{Code: toolerr.HandlerError, Message: d.Message, Details: map[string]any{}}
	if e.Message == "" {
		e.Message = fallback
	}
	if d.Code != "" {
		e.Details["handlerCode"] = d.Code
	}
	if len(d.Details) > 0 && json.Valid(d.Details) {
		e.Details["handlerDetails"] = json.RawMessage(d.Details)
	}
	return e
}

func (t *Tool) memExceeded(refused int64, msg string) error {
	return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitMemMB, Declared: t.limits.memMB, Observed: ceilMB(refused)}, msg)
}

// classify maps an error from running guest code to a native error.
func (t *Tool) classify(ctx context.Context, inv *invocation, err, cause error, acct *limits.Account, cpu time.Duration, stderrTail, entry string) error {
	if errors.Is(cause, errCPUExceeded) {
		return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitCPUMs, Declared: t.limits.cpuMs, Observed: cpu.Milliseconds()},
			fmt.Sprintf("the guest used %d ms of CPU time, over its cpuMs limit of %d", cpu.Milliseconds(), t.limits.cpuMs))
	}
	if r := acct.Refused(); r > 0 {
		what := "memory growth past the memMB cap was refused and the guest then failed"
		if errors.Is(cause, errOutputCap) {
			what = "the guest's output passed the memMB cap"
		}
		return t.memExceeded(r, fmt.Sprintf("%s (memMB %d, the guest needed at least %d bytes)", what, t.limits.memMB, r))
	}
	ctxErr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(d) {
		// The meter saw the deadline on the clock before the context's
		// timer fired (fuel.Meter.SetPoll).
		ctxErr = context.DeadlineExceeded
	}
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return toolerr.Wrap(toolerr.DeadlineExceeded, context.DeadlineExceeded, "the wall deadline passed before the handler finished")
	case errors.Is(ctxErr, context.Canceled):
		return toolerr.Wrap(toolerr.Cancelled, context.Canceled, "the call was cancelled")
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		code := exit.ExitCode()
		tail := strings.TrimSpace(stderrTail)
		if isGoCrash(code, tail) {
			return &toolerr.Error{Code: toolerr.HandlerTrap, Message: "the guest crashed: " + lastLines(tail, 20), Details: map[string]any{"exitCode": code}, Err: err}
		}
		if inv != nil && code != 0 {
			if err := inv.declaredFailure(fmt.Sprintf("the handler exited with code %d", code)); err != nil {
				err.Details["exitCode"] = code
				return err
			}
		}
		msg := tail
		if msg == "" {
			msg = fmt.Sprintf("the handler exited with code %d", code)
		}
		if entry != abi.ExportStart {
			msg = fmt.Sprintf("the handler exited with code %d during %s: %s", code, entry, msg)
		}
		return &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"exitCode": code}, Err: err}
	}
	var hf *hostFailure // an Extism host call failed the call (extism.go)
	if errors.As(err, &hf) {
		return &toolerr.Error{Code: toolerr.HandlerError, Message: hf.msg, Details: hf.details, Err: err}
	}
	var ht *hostTrap // a host function refused the call (host.go, wasi.go)
	if errors.As(err, &ht) {
		return &toolerr.Error{Code: toolerr.HandlerTrap, Message: "trap: " + ht.msg, Details: map[string]any{"trap": ht.msg}, Err: err}
	}
	if trap, stack, ok := parseTrap(err); ok {
		d := map[string]any{"trap": trap}
		if len(stack) > 0 {
			d["stack"] = stack
		}
		msg := "trap: " + trap
		if len(stack) > 0 {
			msg += " (at " + stack[0] + ")"
		}
		// The Go runtime reports a panic on stderr and then traps.
		if tail := strings.TrimSpace(stderrTail); isGoCrash(2, tail) {
			msg = "the guest crashed: " + lastLines(tail, 20) + "\n" + msg
		}
		return &toolerr.Error{Code: toolerr.HandlerTrap, Message: msg, Details: d, Err: err}
	}
	if inv == nil { // instantiation or guest-runtime initialisation
		return toolerr.Wrap(toolerr.HandlerTrap, err, "instantiating the handler failed")
	}
	return toolerr.Wrap(toolerr.Internal, err, "running the handler failed")
}

// isGoCrash recognises the Go runtime's fatal exit (code 2 after "panic:" or
// "fatal error:" on stderr): a trap in Go's terms, not a handler decision.
func isGoCrash(code uint32, tail string) bool {
	if code != 2 {
		return false
	}
	for _, line := range strings.Split(tail, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "runtime: ") {
			return true
		}
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parseTrap extracts the trap name and Wasm stack from a wazero error.
func parseTrap(err error) (trap string, stack []string, ok bool) {
	s := err.Error()
	// wazero reports a stack overflow bare, without "wasm error:" or a stack.
	if s == "stack overflow" || strings.HasSuffix(s, ": stack overflow") {
		return "stack overflow", nil, true
	}
	i := strings.Index(s, "wasm error: ")
	if i < 0 {
		return "", nil, false
	}
	rest := s[i+len("wasm error: "):]
	lines := strings.Split(rest, "\n")
	trap = strings.TrimSpace(lines[0])
	inStack := false
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "wasm stack trace:"):
			inStack = true
		case inStack && l != "" && len(stack) < 32:
			stack = append(stack, l)
		}
	}
	return trap, stack, true
}
