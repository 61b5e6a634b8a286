package executor

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Tool is a loaded tool. It is safe for concurrent use; Close it when done.
// What runs a call is its handler, chosen once at load: an
// ABI reactor, a WASI command or a declarative HTTP request; everything
// else here is the same for every kind.
type Tool struct {
	*toolEnv // what its handler may use of it as well

	exec   *Executor
	m      *manifest.Tool
	digest string
	source string
	// manifestDigest is the sha256 of the manifest bytes Load was given.
	manifestDigest string

	// secretNames are the secrets a call may hand this tool and its egress
	// may substitute: needsSpec.secrets, plus a declarative HTTP tool's
	// spec.authorization secretRef.
	secretNames map[string]bool
	entry       string // the export a modulePath #NAME suffix names, "" for none

	h     handler
	calls callGate // Close waits for running calls
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
	// Tracer, when set, is told about the call's stages and egress
	// requests (trace.go); nil costs nothing.
	Tracer Tracer

	// Timeout and TimeoutSource name the call's deadline in a
	// deadline-exceeded message (DeadlineMessage); they do not set it (the
	// context or Deadline does). Zero: the executor's default timeout, or
	// the caller's context when it has a deadline.
	Timeout       time.Duration
	TimeoutSource TimeoutSource
	// Deadline, when set, ends the call as a context deadline would,
	// without the caller deriving a context for it (the context's own
	// deadline still applies when it is earlier): a server that answers at
	// the deadline itself need not pay for a timer context per call.
	Deadline time.Time

	// Record, when set, records the call (docs/replay.md): it runs on a
	// fresh instance and every host answer is kept; write the recording
	// with Record.WriteTo once Invoke returned (it holds Input until then:
	// do not modify it). nil costs nothing.
	Record *Recorder

	validated json.RawMessage // set once the input validated
	replay    *replayer       // Tool.Replay's
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
	// Acquired is how the call got its instance ("" when it ran on none:
	// a declarative HTTP tool).
	Acquired Acquisition
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
	return t.finish(ctx, &req, res, err, start)
}

// invokeObserved is Invoke with the lifecycle events.
func (t *Tool) invokeObserved(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	if req.CallID == "" {
		req.CallID = NewCallID()
	}
	t.observe(CallEvent{Phase: PhasePending, CallID: req.CallID, Context: &req.Context})
	res, err := t.invoke(ctx, &req, &req.Context)
	res, err = t.finish(ctx, &req, res, err, start)
	if err != nil {
		t.observe(CallEvent{Phase: PhaseFailed, CallID: req.CallID, Context: &req.Context, Input: req.validated, Result: res, Err: err})
		return res, err
	}
	t.observe(CallEvent{Phase: PhaseCompleted, CallID: req.CallID, Context: &req.Context, Input: req.validated, Result: res})
	return res, nil
}

// finish sets the call's wall time and names the tool in its error; a
// deadline-exceeded error gets DeadlineMessage's wording.
func (t *Tool) finish(ctx context.Context, req *Request, res *Result, err error, start time.Time) (*Result, error) {
	if res != nil {
		res.Usage.WallMs = round3(float64(time.Since(start)) / float64(time.Millisecond))
	}
	if err != nil {
		te := toolerr.As(err)
		if te.Code == toolerr.DeadlineExceeded {
			te = t.deadlineError(te, ctx, req)
		}
		err = te.WithTool(t.ID())
	}
	if req.Record != nil {
		req.Record.end(res, err, req.validated != nil)
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

// invoke runs the call of req; observed is the context the observer's
// events carry (nil: no observer).
func (t *Tool) invoke(ctx context.Context, req *Request, observed *CallContext) (*Result, error) {
	// The call's context (a callCtx): ended by ctx, by Close and by the
	// default timeout when ctx sets no deadline.
	c, ok := t.calls.enter(ctx, t.exec.cfg.defaultTimeout, req.Deadline)
	if !ok || t.closed.Load() {
		if ok {
			c.release()
		}
		return nil, toolerr.New(toolerr.Internal, "tool %s is closed", t.ID())
	}
	defer c.release()
	if req.Record != nil {
		req.Record.begin(t, req)
	}
	if err := c.Err(); err != nil {
		return nil, stopError(c, err)
	}
	// Validation is metered like guest work (validate.go; G01).
	tr := req.Tracer
	if tr != nil {
		tr.StageStart(StageInputValidation)
	}
	input, vcpu, err := t.validateInput(c, req.Input)
	if tr != nil {
		tr.StageEnd(StageInputValidation, "", err)
	}
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
	inv := &invocation{tool: t, input: input, cc: req.Context, env: env, config: cfgValues, secrets: t.declaredSecrets(req.Context.Secrets), trace: tr}
	if req.Record != nil || req.replay != nil {
		inv.startTape(req) // record.go
	}
	if len(t.needs.secrets) > 0 && req.replay == nil { // before any guest starts, metered (G01); a replay has no values
		scpu, err := t.validating(c, 0, inv.checkSecrets)
		if err != nil {
			return nil, err
		}
		vcpu += scpu
	}
	// A reactor reports its instance acquisition and guest run itself
	// (reactor.go); for the other kinds the guest stage is the whole run.
	_, staged := t.h.(*reactorHandler)
	if !staged {
		inv.stageStart(StageGuest)
	}
	out := t.h.run(c, inv, env)
	if !staged {
		inv.stageEnd(StageGuest, "", out.err)
	}
	res := &Result{Usage: Usage{CPUMs: cpuMs(out.cpu + vcpu), PeakMemMB: round2(float64(out.peak) / limits.MiB), Fuel: out.fuel}, Acquired: out.acquired}
	res.Egress = inv.egressAttempts()
	if out.err != nil {
		return res, out.err
	}
	if tr != nil {
		tr.StageStart(StageOutputValidation)
	}
	output, ocpu, err := t.validateOutput(c, out.output, max(t.limits.memMB*limits.MiB-out.peak, 1), out.cpu) // the memMB headroom left (F18)
	if tr != nil {
		tr.StageEnd(StageOutputValidation, "", err)
	}
	res.Usage.CPUMs = cpuMs(out.cpu + vcpu + ocpu)
	if err != nil {
		if te := toolerr.As(err); te.Code == toolerr.OutputValidationFailed && inv.outputUnset {
			te.Message = "the handler returned 0 without calling output_set, so its output is null: " + te.Message
		}
		return res, err
	}
	if err := c.Err(); err != nil {
		return res, stopError(c, err) // never a result after the deadline
	}
	res.Output = output
	return res, nil
}

func (t *Tool) declaredSecrets(given map[string]string) map[string]string {
	if len(t.secretNames) == 0 || len(given) == 0 {
		return nil // read only (secretValue, resolveNeeds): nil reads as empty
	}
	out := make(map[string]string, len(t.secretNames))
	for name := range t.secretNames {
		if v, ok := given[name]; ok {
			out[name] = v
		}
	}
	return out
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
