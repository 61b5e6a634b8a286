package server

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// This file is the transport-neutral service core: a transport adapter
// (the pack protocol's HTTP routes, the MCP server of package mcp) turns
// its request into a Call, and the core applies, once for every
// transport, the catalog lookup, admission (the global, per-tool and
// per-tenant caps and the per-tenant fair queue, admission.go), the drain
// accounting, the deadline (the outcome is returned at the deadline
// without waiting for the guest), metrics and the call record. The adapter only renders the Outcome.
//
// A guardrail check (Call.Check) goes through the same path: it is a tool
// of the catalog's check map whose input the core builds from the
// check-invoke's config and trace (pack.Check.Input: the config validated
// against its configSchema as sent).

// Refusal says why the core did not run a call. A refused call provably
// did not run and may be retried (the pack protocol answers 503 with
// Retry-After; MCP answers a JSON-RPC error).
type Refusal string

// The refusals. Each is also the reason label of sandboxd_rejected_total;
// those of admission (over-capacity and the tenant refusals of
// admission.go) also of sandboxd_admission_refused_total.
const (
	RefusedDraining Refusal = "draining"
	RefusedNotReady Refusal = "not-ready"
	// RefusedToolBusy is no longer answered: a call whose tool is at its
	// cap waits in its tenant's queue (admission.go). Kept for callers
	// that name it.
	RefusedToolBusy     Refusal = "tool-busy"
	RefusedOverCapacity Refusal = "over-capacity"
)

// Reason is a one-line explanation of r for a caller.
func (r Refusal) Reason(toolID string) string {
	switch r {
	case RefusedDraining:
		return "draining"
	case RefusedNotReady:
		return "not ready"
	case RefusedToolBusy:
		return "tool " + toolID + " is at its concurrency cap"
	case RefusedOverCapacity:
		return "over capacity"
	case RefusedTenantQueue:
		return "tenant-queue-full: the call's tenant has as many calls waiting as it may"
	case RefusedTenantCPU:
		return "tenant-cpu-budget: the call's tenant spent its CPU budget for this window"
	}
	return string(r)
}

// Call is one tool call as a transport adapter hands it to the core.
type Call struct {
	// Tool is the tool id.
	Tool string
	// Version, when HasVersion, must equal the tool's pinned version
	// (else tool-version-mismatch).
	Version    string
	HasVersion bool
	// Input is the tool input, one JSON value (validated by the executor).
	Input []byte
	// Context is the call context.
	Context executor.CallContext
	// Start is when the request reached the adapter (durations and the
	// deadline's message count from it); zero means now.
	Start time.Time
	// Deadline bounds queueing and running; zero means Start+DefaultTimeout.
	// The call's context (its cancellation) is the ctx given to Call.
	Deadline time.Time
	// TimeoutSource names what set Deadline (kindgi-timeout-ms, an MCP
	// _meta key; zero: the default) in a deadline-exceeded message.
	TimeoutSource executor.TimeoutSource
	// TraceID and SpanID join the call record (from a W3C traceparent;
	// see ParseTraceparent).
	TraceID, SpanID string
	// Release, when set, is called exactly once when the call is over:
	// when Call returns, or when its guest has stopped if that is later
	// (the pack adapter holds its request body's budget charge until then).
	Release func()
	// release is Release for this package's adapter (its request body's
	// charge): an interface, not a func value, which would be an
	// allocation per call. Both run when both are set.
	release releaser
	// Running, when set, is called with the call id once the call holds
	// its slots, just before the guest starts (MCP progress).
	Running func(callID string)
	// Check makes the call a guardrail check-invoke: Tool is the check id,
	// Config and Trace replace Input, and an unknown id is
	// tool-not-in-pack natively (check-not-in-pack on the wire).
	Check         bool
	Config, Trace json.RawMessage
}

// Outcome is what the core answers for a Call. Exactly one of Refused,
// Gone, Err (a failure) or success (Err nil) describes it.
type Outcome struct {
	// Refused is set when the call did not run (nothing was recorded but
	// the refusal metric).
	Refused Refusal
	// RetryAfter, with Refused, is how long to wait before retrying
	// (zero: the default, 1 s; see RetryAfterSeconds).
	RetryAfter time.Duration
	// Gone is set when the call's context ended while it waited for a
	// slot: the caller went away and there is nobody to answer.
	Gone bool
	// Output is the validated output of a successful call.
	Output json.RawMessage
	// Err is the failure, with its native code and ToolID; nil on success.
	// Code toolerr.Internal means the service itself failed.
	Err *toolerr.Error
	// Usage is set when the guest ran.
	Usage *executor.Usage
	// CallID is the toolCallId of the call's lifecycle events ("" when no
	// guest started).
	CallID string
	// ArtifactVersion is the serving catalog's artifact version.
	ArtifactVersion string

	entry    *entry
	input    []byte
	deadline time.Time // the call's: the projection's validation stops there
	ran      bool
}

// Envelope returns the canonical x.ai/tool envelope (package events) of
// the call's tool: with the projection of the validated input (defaults
// filled) when the call got past input validation, without it otherwise.
// ok is false when the tool is not in the catalog.
func (o *Outcome) Envelope() (meta events.Meta, ok bool) {
	if o.entry == nil {
		return events.Meta{}, false
	}
	m := o.entry.tool.Manifest()
	if !o.ran || (o.Err != nil && o.Err.Code == toolerr.InputValidationFailed) {
		return events.NewMeta(m, nil), true
	}
	return events.NewMeta(m, o.entry.validated(o.input, o.deadline)), true
}

// Ticket is one admitted call's place in the drain accounting: a drain
// waits until every Ticket is closed. An adapter closes it once its answer
// is written, so that a drain also waits for the answer to go out.
type Ticket struct {
	s      *Server
	closed atomic.Bool
}

// Admit registers a call with the drain accounting. It refuses while the
// service drains or is not ready. The caller must Close the Ticket.
func (s *Server) Admit() (*Ticket, Refusal) {
	t := new(Ticket)
	if r := s.admit(t); r != "" {
		return nil, r
	}
	return t, ""
}

// admit is Admit into t, a zero Ticket the caller holds (the pack
// adapter's, on its stack: no allocation).
func (s *Server) admit(t *Ticket) Refusal {
	// Register, then check: a drain that set draining before this call
	// registered is seen here; one that set it after sees the
	// registration and waits for it (see Server.drained).
	s.active.Add(1)
	if s.draining.Load() {
		s.leave()
		s.metrics.reject(string(RefusedDraining))
		return RefusedDraining
	}
	t.s = s
	if !s.Ready() {
		t.Close()
		s.metrics.reject(string(RefusedNotReady))
		return RefusedNotReady
	}
	return ""
}

// Draining reports whether the service is draining (it admits no call).
func (s *Server) Draining() bool { return s.isDraining() }

// Close ends the Ticket; later calls do nothing.
func (t *Ticket) Close() {
	if t.closed.CompareAndSwap(false, true) {
		t.s.leave()
	}
}

// leave ends a registration; the last one during a drain wakes the drain.
func (s *Server) leave() {
	if s.active.Add(-1) == 0 && s.draining.Load() {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// Call admits and runs one call (Admit, Ticket.Call, Close). Adapters that
// answer after Call returns (the answer written outside the drain
// accounting) should use Admit themselves.
func (s *Server) Call(ctx context.Context, c Call) Outcome {
	t, r := s.Admit()
	if r != "" {
		if c.Release != nil {
			c.Release()
		}
		return Outcome{Refused: r}
	}
	defer t.Close()
	return t.Call(ctx, c)
}

// Call runs c on the serving catalog: catalog lookup, version pin,
// admission (a global, a per-tool and a per-tenant slot, queueing fairly
// across tenants while there is room), then the guest on its own
// goroutine. It returns when the guest is done or at the deadline,
// whichever is first (the guest's slots are released when it has really
// stopped). The record and metrics are written before it returns.
// Call it once per Ticket.
func (t *Ticket) Call(ctx context.Context, c Call) (o Outcome) {
	s := t.s
	// g is what the guest's run needs (guestRun.run): one allocation,
	// made first since it holds the once-only Release.
	g := &guestRun{s: s, rel: onceFunc{f: c.Release, r: c.release}}
	guestOwnsRelease := false
	defer func() {
		if !guestOwnsRelease {
			g.rel.call()
		}
	}()
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	if c.Deadline.IsZero() {
		c.Deadline = c.Start.Add(DefaultTimeout)
	}
	timeout := c.Deadline.Sub(c.Start)
	cat := s.current()
	defer cat.release()
	target, entries := "tool", cat.tools
	if c.Check {
		target, entries = "check", cat.checks
	}
	rec := &callRecord{id: c.Tool, target: target, start: c.Start, cc: c.Context, traceID: c.TraceID, spanID: c.SpanID}
	// Metrics series exist only for tools and checks of the serving
	// catalog: any other id a caller sends is counted under one label.
	mid := UnknownToolLabel
	e, ok := entries[c.Tool]
	if ok {
		mid = c.Tool
	}
	// Tracing (tracing.go): without it, ct stays nil and nothing of it runs.
	var ct *callTrace
	if s.tracing != nil {
		tc := c // only a traced call's Call escapes (startCall keeps it)
		ct = s.tracing.startCall(&tc)
		defer func() { ct.end(&o, e, rec.outcome) }()
	}
	out := Outcome{ArtifactVersion: cat.artifactVersion, entry: e}
	fail := func(te *toolerr.Error, usage *executor.Usage) Outcome {
		out.Err, out.Usage = te, usage
		s.finish(rec, mid, te, usage)
		return out
	}
	if !ok && c.Check {
		out.entry = nil
		return fail(toolerr.New(toolerr.ToolNotInPack, "This pack has no check %q%s", clip(c.Tool), notInPackHint(c.Tool, cat.checkOrder)).WithTool(c.Tool), nil)
	}
	if !ok {
		out.entry = nil
		return fail(toolerr.New(toolerr.ToolNotInPack, "tool %q is not in pack %s%s", clip(c.Tool), cat.packID, notInPackHint(c.Tool, cat.order)).WithTool(c.Tool), nil)
	}
	if c.Check {
		_, cpu := e.tool.Limits()
		in, err := e.check.InputLimited(c.Config, c.Trace, callWork(ctx, c.Deadline, cpu))
		if err != nil {
			return fail(toolerr.As(err).WithTool(c.Tool), nil)
		}
		c.Input = in
	}
	if c.HasVersion && c.Version != e.version {
		return fail(toolerr.New(toolerr.ToolVersionMismatch, "tool %s is version %q here, not %q", c.Tool, e.version, clip(c.Version)).WithTool(c.Tool), nil)
	}

	// Admission (admission.go): a global slot, one of the tool's and one
	// of the tenant's, waiting in the tenant's queue if there is room. A
	// refusal means the call provably did not run.
	// The deadline is the core's own (admission's wait, the guest's
	// Request.Deadline, the wait for the guest below), not a context
	// derived for it: context.WithDeadline was a timer context, a timer,
	// a done channel and the caller's child map per call, 10% of the
	// served path's allocated bytes (bench-serve -memprofile).
	queuedAt := time.Now()
	var asp trace.Span
	if ct != nil {
		asp = ct.admission()
	}
	sl, refused, retry, qerr := s.adm.enter(ctx, c.Deadline, c.Context.TenantID, &e.slots)
	if asp != nil {
		endAdmission(asp, refused, qerr)
	}
	if refused == "" && qerr == nil {
		s.metrics.admitted(mid, time.Since(queuedAt).Seconds())
	}
	switch {
	case refused != "":
		s.metrics.refuseAdmission(string(refused))
		return Outcome{Refused: refused, RetryAfter: retry}
	case qerr == nil:
	case errors.Is(qerr, context.DeadlineExceeded):
		return fail(toolerr.New(toolerr.DeadlineExceeded, "%s while it waited for a slot", executor.DeadlineMessage(timeout, c.TimeoutSource)).WithTool(c.Tool), nil)
	default:
		out.Gone = true
		return fail(toolerr.New(toolerr.Cancelled, "the caller went away while the call waited for a slot").WithTool(c.Tool), nil)
	}

	// The guest runs on its own goroutine so that the outcome can be
	// returned at the deadline without waiting for it; its slots are
	// released when it has really stopped.
	callID := executor.NewCallID()
	rec.callID, out.CallID, out.ran, out.input, out.deadline = callID, callID, true, c.Input, c.Deadline
	if c.Running != nil {
		c.Running(callID)
	}
	var tracer executor.Tracer
	if ct != nil {
		tracer = ct
	}
	g.sl, g.cat, g.e, g.ctx = sl, cat, e, ctx
	g.req = executor.Request{CallID: callID, Input: c.Input, Context: c.Context, Tracer: tracer, Timeout: timeout, TimeoutSource: c.TimeoutSource,
		Deadline: c.Deadline}
	g.done = make(chan struct{}, 1)
	done := g.done
	cat.hold() // the guest may outlive this call (answered at the deadline)
	guestOwnsRelease = true
	s.guests.Add(1)
	s.activeGuests.Add(1)
	s.goGuest(g)
	var r guestResult
	dl := startWait(c.Deadline)
	defer stopWait(dl)
	select {
	case <-done:
		r = g.result
	case <-dl.C:
		return fail(toolerr.New(toolerr.DeadlineExceeded, "%s", executor.DeadlineMessage(timeout, c.TimeoutSource)).WithTool(c.Tool), nil)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) { // the caller's own deadline
			return fail(toolerr.New(toolerr.DeadlineExceeded, "%s", executor.DeadlineMessage(timeout, c.TimeoutSource)).WithTool(c.Tool), nil)
		}
		// The caller went away: the guest is being cancelled; wait for it
		// to stop so that the record carries what it used.
		<-done
		r = g.result
		if r.err == nil {
			r.err = toolerr.New(toolerr.Cancelled, "the caller closed the connection")
		}
		if te := toolerr.As(r.err); te.Code != toolerr.Cancelled {
			r.err = toolerr.Wrap(toolerr.Cancelled, te, "the caller closed the connection")
		}
	}
	rec.recording = r.recording
	var usage *executor.Usage
	if r.res != nil {
		g.usage = r.res.Usage // the guest is done with g: it sent done
		usage = &g.usage
		s.metrics.egressAttempts(mid, r.res.Egress)
		s.metrics.acquired(mid, r.res.Acquired)
	}
	if r.err == nil {
		out.Output, out.Usage = r.res.Output, usage
		s.finish(rec, mid, nil, usage)
		return out
	}
	return fail(toolerr.As(r.err).WithTool(c.Tool), usage)
}

// waitTimers is the free list of the timers Ticket.Call waits for its
// guest with (a timer per call is an allocation and a new runtime timer).
// Stop and Reset leave no stale tick in the channel (Go 1.23 timers).
var waitTimers sync.Pool

// startWait returns a timer that fires at deadline.
func startWait(deadline time.Time) *time.Timer {
	d := time.Until(deadline)
	if t, _ := waitTimers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// stopWait stops t and gives it back to the free list.
func stopWait(t *time.Timer) {
	t.Stop()
	waitTimers.Put(t)
}

// guestRun is one call's guest run as Ticket.Call hands it to a guest
// worker, in one allocation (a closure over the call's variables took
// four: the Call, the once-func and its method value, the closure).
type guestRun struct {
	s   *Server
	rel onceFunc // the Call's Release, once
	sl  slot
	cat *catalog // held for the run
	e   *entry
	ctx context.Context
	req executor.Request
	// done is sent to once result is set; nothing of the run touches g
	// after that. A channel of struct{} is one allocation; one of
	// guestResult, which holds pointers, was two (the channel and its
	// buffer).
	done   chan struct{}
	result guestResult
	// usage is the outcome's copy of the guest's usage (set by the
	// call's goroutine once it received the result).
	usage executor.Usage
}

// guestResult is what a guest run hands back.
type guestResult struct {
	res       *executor.Result
	err       error
	recording string // the kept recording's file (recordings.go)
}

// run runs the guest and sends its result. The slots are released before
// the outcome is handed over, so a client that gets its answer and calls
// again at once never finds its own finished call still counted; and
// only here, once Invoke has returned (the guest stopped and the host
// work after it, the output's validation, done), even when the call was
// answered at its deadline long before: a released slot means the work
// is over.
func (g *guestRun) run() {
	s := g.s
	var r guestResult
	func() {
		defer func() {
			cpu := 0.0
			if r.res != nil {
				cpu = r.res.Usage.CPUMs
			}
			if s.guestDoneHook != nil {
				s.guestDoneHook()
			}
			s.adm.leave(g.sl, cpu)
			g.rel.call()
			g.cat.release()
			s.activeGuests.Add(-1)
			s.guests.Done()
		}()
		req := g.req
		var sampled bool
		if s.recs != nil {
			req.Record, sampled = s.recs.start()
		}
		r.res, r.err = g.e.tool.Invoke(g.ctx, req)
		if req.Record != nil {
			r.recording = s.recs.keep(req.Record, req.CallID, r.err, sampled)
		}
	}()
	g.result = r
	g.done <- struct{}{}
}

// onceFunc calls f and r.release (those set) the first time call is
// called; later calls do nothing. Cheaper than sync.OnceFunc (one
// allocation, no mutex): the callers of Ticket.Call's release never race
// on it (exactly one of the handler and the guest goroutine owns it).
type onceFunc struct {
	f    func()
	r    releaser
	done atomic.Bool
}

// releaser is what onceFunc calls besides f.
type releaser interface{ release() }

func (o *onceFunc) call() {
	if (o.f != nil || o.r != nil) && o.done.CompareAndSwap(false, true) {
		if o.f != nil {
			o.f()
		}
		if o.r != nil {
			o.r.release()
		}
	}
}

// finish writes the call record and the call's metrics. The outcome label
// is "ok", the wire code of te, or "internal-error"; the record's code is
// the native code when the wire code differs or te has details.
func (s *Server) finish(rec *callRecord, mid string, te *toolerr.Error, usage *executor.Usage) {
	code, ok := wireCode(te)
	if rec.target == "check" && code == WireToolNotInPack {
		code = WireCheckNotInPack
	}
	switch {
	case te == nil:
		rec.outcome = "ok"
	case ok:
		rec.outcome = string(code)
		if string(code) != string(te.Code) || len(te.Details) > 0 {
			rec.code = string(te.Code)
		}
	default:
		rec.outcome, rec.code = "internal-error", string(te.Code)
	}
	s.record(rec)
	if te != nil && te.Code == toolerr.LimitsExceeded {
		l, _ := te.Details["limit"].(string)
		s.metrics.limitExceeded(mid, toolerr.Limit(l))
	}
	s.metrics.call(mid, rec.outcome, time.Since(rec.start).Seconds(), usage != nil, usageCPU(usage), usagePeak(usage))
}

func wireCode(te *toolerr.Error) (WireCode, bool) {
	if te == nil {
		return "", false
	}
	return WireCodeOf(te.Code)
}

// CatalogTool is one tool of the serving catalog as adapters list it.
type CatalogTool struct {
	// ID is the tool id.
	ID string
	// Version is the version a caller may pin ("" when none).
	Version string
	// Manifest is the tool's manifest (read-only).
	Manifest *manifest.Manifest
}

// Tools lists the serving catalog's tools, sorted by id.
func (s *Server) Tools() []CatalogTool {
	c := s.current()
	defer c.release()
	out := make([]CatalogTool, 0, len(c.order))
	for _, id := range c.order {
		e := c.tools[id]
		out = append(out, CatalogTool{ID: id, Version: e.version, Manifest: e.tool.Manifest()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// OnReload registers fn to be called after every successful Reload (an
// adapter that lists tools refreshes its list). fn must not block.
func (s *Server) OnReload(fn func()) {
	s.hookMu.Lock()
	s.reloadHooks = append(s.reloadHooks, fn)
	s.hookMu.Unlock()
}

func (s *Server) reloaded() {
	s.hookMu.Lock()
	hooks := append([]func(){}, s.reloadHooks...)
	s.hookMu.Unlock()
	for _, fn := range hooks {
		fn()
	}
}

// validated returns input validated against the tool's input schema with
// defaults filled, for the envelope's projection; the raw input when the
// tool declares no projection (it is not used then) or it cannot be
// validated again. Validating it again is host work for the call, metered
// as the executor's validation is (G01): within the work budget of the
// tool's cpuMs and stopped at the call's deadline (past it, the raw input).
func (e *entry) validated(input []byte, deadline time.Time) []byte {
	m := e.tool.Manifest()
	x, _ := m.Metadata[events.MetaKey].(map[string]any)
	if _, mapped := x["input"]; !mapped {
		return input
	}
	e.schemaOnce.Do(func() { e.schema, _ = manifest.Load(e.spec) })
	if e.schema == nil {
		return input
	}
	mem, cpu := e.tool.Limits()
	w := manifest.Work{Limit: manifest.WorkLimit(cpu), Check: func() error {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return context.DeadlineExceeded
		}
		return nil
	}}
	v, err := e.schema.ValidateInputLimited(input, mem*limits.MiB, w)
	if err != nil {
		return input
	}
	return v
}

// callWork is the work budget of validating a call's document in the
// core (a check's config): the tool's cpuMs worth (manifest.WorkLimit),
// stopped when ctx ends or deadline passes (G01).
func callWork(ctx context.Context, deadline time.Time, cpuMs int64) manifest.Work {
	return manifest.Work{Limit: manifest.WorkLimit(cpuMs), Check: func() error {
		if err := ctx.Err(); err != nil {
			return toolerr.As(err)
		}
		if !time.Now().Before(deadline) {
			return toolerr.New(toolerr.DeadlineExceeded, "the deadline passed while the check's config was validated")
		}
		return nil
	}}
}

// guestIdle is how long a guest worker waits for another call before it
// exits (Server.guestIdle, when set, replaces it: tests).
const guestIdle = 5 * time.Second

// goGuest runs g on a guest worker: an idle one if there is one, else a
// new one. Workers outlive a call so that a call does not pay to grow a
// fresh goroutine's stack (validation and the guest call need tens of
// KiB); each exits after guestIdle without work.
func (s *Server) goGuest(g *guestRun) {
	select {
	case s.guestWork <- g:
	default:
		go s.guestWorker(g)
	}
}

// guestWorker runs g, then the calls goGuest hands it, until it has been
// idle for guestIdle. Its timer is not reset per call (a timer reset is a
// lock and a heap update of the runtime's timers, 0.7% of the served
// path's CPU under wrk): when it fires, a worker that worked since is
// given the rest of its idle time from its last call, so it exits
// guestIdle after that call as before, and its timer fires at most once
// per guestIdle while it is busy.
func (s *Server) guestWorker(g *guestRun) {
	s.guestWorkers.Add(1)
	defer s.guestWorkers.Add(-1)
	idleFor := guestIdle
	if s.guestIdle > 0 {
		idleFor = s.guestIdle
	}
	idle := time.NewTimer(idleFor)
	defer idle.Stop()
	for {
		g.run()
		g = nil // keep nothing of the call (its input) while idle
		last := time.Now()
	wait:
		select {
		case g = <-s.guestWork:
		case <-idle.C:
			if rest := idleFor - time.Since(last); rest > 0 {
				idle.Reset(rest)
				goto wait
			}
			return
		}
	}
}
