package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// This file is the OpenTelemetry tracing of calls (docs/operations.md
// "Traces"): a tool.invoke span per call, parented by the caller's W3C
// traceparent, with a child per stage (admission wait, and through the
// executor's narrow Tracer hook: input validation, instance acquisition,
// guest run, output validation) and a client span per egress request the
// guest makes, whose traceparent the request carries. Without Options.Tracing
// nothing of it runs: the call path checks one nil pointer.

// TracingOptions configure NewTracing.
type TracingOptions struct {
	// Endpoint is the OTLP/HTTP collector URL (--otlp-endpoint), e.g.
	// http://collector:4318 (the path /v1/traces is added when the URL has
	// none). Empty: the standard OTEL_EXPORTER_OTLP_* variables configure
	// the exporter.
	Endpoint string
	// NoTraceparent lists destinations (the allowlist entry grammar,
	// [scheme://]host[:port]) whose requests carry no traceparent
	// (--otlp-no-traceparent); their spans are still recorded.
	NoTraceparent []egress.Entry
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// Processor, when set, replaces the batching OTLP exporter (tests).
	Processor sdktrace.SpanProcessor
}

// TracingConfigured reports whether tracing is asked for: an endpoint, or
// one of the standard OTLP endpoint variables, unless OTEL_SDK_DISABLED is
// true or OTEL_TRACES_EXPORTER is none.
func TracingConfigured(endpoint string) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracing exports the spans of calls. Create it with NewTracing, give it to
// Options.Tracing, and Shutdown it after the server (it flushes).
type Tracing struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	noHeader []egress.Entry
}

// NewTracing makes the OTLP/HTTP exporter and the tracer provider. The
// exporter sends in batches off the call path; a collector that is down
// costs dropped spans, never a call. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES are honoured (service.name defaults to
// sandboxd), and so is OTEL_TRACES_SAMPLER.
func NewTracing(ctx context.Context, o TracingOptions) (*Tracing, error) {
	proc := o.Processor
	if proc == nil {
		var opts []otlptracehttp.Option
		if o.Endpoint != "" {
			u, err := url.Parse(o.Endpoint)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("otlp endpoint %q: want http(s)://host[:port][/path]", o.Endpoint)
			}
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		proc = sdktrace.NewBatchSpanProcessor(exp)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "sandboxd"), attribute.String("service.version", o.ServiceVersion)), resource.Environment())
	if err != nil {
		res = resource.Environment()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tracer: tp.Tracer("github.com/sandboxd/sandboxd/server"), noHeader: o.NoTraceparent}, nil
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// ForceFlush exports the spans ended so far.
func (t *Tracing) ForceFlush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// callTrace is one call's spans; it is the executor.Tracer of the call.
// The stage spans and guest are touched only by the goroutine running the
// guest (executor.Tracer's contract); root is ended by the adapter's
// goroutine, possibly before the guest stops (answered at the deadline).
type callTrace struct {
	t     *Tracing
	ctx   context.Context // carries root
	root  trace.Span
	stage [4]trace.Span   // by executor.Stage
	guest context.Context // the guest-run span's, while it runs: egress spans' parent
}

// startCall starts c's tool.invoke span at c.Start, the child of the
// caller's traceparent when it sent a valid one.
func (t *Tracing) startCall(c *Call) *callTrace {
	ctx := context.Background()
	if c.TraceID != "" {
		tid, err1 := trace.TraceIDFromHex(c.TraceID)
		sid, err2 := trace.SpanIDFromHex(c.SpanID)
		if err1 == nil && err2 == nil {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
		}
	}
	target := "tool"
	if c.Check {
		target = "check"
	}
	ctx, root := t.tracer.Start(ctx, "tool.invoke", trace.WithTimestamp(c.Start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("tool.id", clip(c.Tool)), attribute.String("tool.target", target)))
	return &callTrace{t: t, ctx: ctx, root: root}
}

// admission returns the admission-wait span, started now.
func (ct *callTrace) admission() trace.Span {
	_, sp := ct.t.tracer.Start(ct.ctx, "admission.wait")
	return sp
}

// endAdmission ends the admission span with its result.
func endAdmission(sp trace.Span, refused Refusal, err error) {
	switch {
	case refused != "":
		sp.SetAttributes(attribute.String("admission.refused", string(refused)))
		sp.SetStatus(codes.Error, string(refused))
	case err != nil:
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// end sets the call's outcome and usage on the root span and ends it.
// outcome is the record's ("" when the call was refused before one).
func (ct *callTrace) end(o *Outcome, e *entry, outcome string) {
	if o.Refused != "" {
		outcome = "refused-" + string(o.Refused)
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attribute.String("outcome.code", outcome))
	if e != nil {
		attrs = append(attrs, attribute.String("tool.version", e.version), attribute.String("tool.posture", string(e.tool.Posture())))
	}
	if o.CallID != "" {
		attrs = append(attrs, attribute.String("tool.call_id", o.CallID))
	}
	if u := o.Usage; u != nil {
		attrs = append(attrs, attribute.Float64("usage.cpuMs", u.CPUMs), attribute.Int64("usage.fuel", u.Fuel), attribute.Float64("usage.peakMemMB", u.PeakMemMB))
	}
	ct.root.SetAttributes(attrs...)
	if outcome != "ok" {
		ct.root.SetStatus(codes.Error, outcome)
	}
	ct.root.End()
}

var stageSpan = [...]string{
	executor.StageInputValidation:  "input.validation",
	executor.StageAcquire:          "instance.acquire",
	executor.StageGuest:            "guest.run",
	executor.StageOutputValidation: "output.validation",
}

// StageStart implements executor.Tracer.
func (ct *callTrace) StageStart(s executor.Stage) {
	if int(s) >= len(ct.stage) {
		return
	}
	ctx, sp := ct.t.tracer.Start(ct.ctx, stageSpan[s])
	ct.stage[s] = sp
	if s == executor.StageGuest {
		ct.guest = ctx
	}
}

// StageEnd implements executor.Tracer.
func (ct *callTrace) StageEnd(s executor.Stage, detail string, err error) {
	if int(s) >= len(ct.stage) || ct.stage[s] == nil {
		return
	}
	sp := ct.stage[s]
	ct.stage[s] = nil
	if detail != "" {
		sp.SetAttributes(attribute.String("instance.acquisition", detail))
	}
	if err != nil {
		code := codeOf(err)
		sp.SetAttributes(attribute.String("error.type", code))
		sp.SetStatus(codes.Error, code)
	}
	sp.End()
	if s == executor.StageGuest {
		ct.guest = nil
	}
}

// Egress implements executor.Tracer: a client span, child of the guest
// run, whose id the request's traceparent carries unless the destination
// is one of --otlp-no-traceparent.
func (ct *callTrace) Egress(method string, dest egress.Origin) (string, func(int, error)) {
	parent := ct.guest
	if parent == nil {
		parent = ct.ctx
	}
	_, sp := ct.t.tracer.Start(parent, method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", method), attribute.String("url.scheme", dest.Scheme),
		attribute.String("server.address", dest.Host.String()), attribute.Int("server.port", dest.Port)))
	tp := ""
	if !ct.t.noTraceparent(dest) {
		tp = formatTraceparent(sp.SpanContext())
	}
	return tp, func(status int, err error) {
		if status > 0 {
			sp.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if err != nil {
			reason := "error"
			var ee *egress.Error
			if errors.As(err, &ee) {
				reason = string(ee.Reason)
			}
			sp.SetAttributes(attribute.String("error.type", reason))
			sp.SetStatus(codes.Error, reason)
		} else if status >= 500 {
			sp.SetStatus(codes.Error, strconv.Itoa(status))
		}
		sp.End()
	}
}

func (t *Tracing) noTraceparent(o egress.Origin) bool {
	for _, e := range t.noHeader {
		if e.Matches(o) {
			return true
		}
	}
	return false
}

// formatTraceparent is sc as a W3C traceparent header value.
func formatTraceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// codeOf is the native error code of a stage's failure.
func codeOf(err error) string { return string(toolerr.As(err).Code) }

var _ executor.Tracer = (*callTrace)(nil)
