package server_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// otlpReceiver is an OTLP/HTTP trace collector on loopback: it decodes
// each POST /v1/traces body as an ExportTraceServiceRequest (protobuf) and
// keeps the spans.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
	spans []*tracepb.Span
}

func startReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("receiver got %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "unexpected", 400)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("receiver: not an ExportTraceServiceRequest: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, &req)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

// trace returns the received spans of trace id tid.
func (rc *otlpReceiver) trace(tid string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if hex.EncodeToString(s.TraceId) == tid {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			v := kv.Value
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetIntValue() != 0:
				return fmt.Sprint(v.GetIntValue())
			case v.GetDoubleValue() != 0:
				return fmt.Sprint(v.GetDoubleValue())
			}
			return "0"
		}
	}
	return ""
}

// testResolver resolves every *.test name to 127.0.0.1 without DNS.
type testResolver struct{}

func (testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopbackExecutor lets guests reach loopback upstreams as an operator
// would: --egress-allow-cidr 127.0.0.0/8, *.test names on 127.0.0.1.
func loopbackExecutor(t *testing.T) *executor.Executor {
	return newExecutor(t, executor.NewConfig().WithEgressAllowCIDRs(netip.MustParsePrefix("127.0.0.0/8")).WithEgressResolver(testResolver{}))
}

// upstream records the traceparent of every request it gets.
type upstream struct {
	url, port string
	mu        sync.Mutex
	seen      []string // traceparent values ("" when absent)
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("traceparent")+"|"+r.Header.Get("tracestate"))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	_, u.port, _ = net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	u.url = "http://api.test:" + u.port
	return u
}

func (u *upstream) last(t *testing.T) (traceparent, tracestate string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		t.Fatal("the upstream got no request")
	}
	tp, ts, _ := strings.Cut(u.seen[len(u.seen)-1], "|")
	return tp, ts
}

// fetchTool is a declarative HTTP tool GETting base/items; its spec sets a
// traceparent and a tracestate of its own, which must never be sent.
func fetchTool(t *testing.T, base string) server.StaticTool {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id": "t.fetch", "version": "1.2.3", "description": "fetches", "input": map[string]any{"type": "object"}, "output": map[string]any{},
		"spec": map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/items", "headers": []map[string]any{
			{"name": "traceparent", "value": "00-11111111111111111111111111111111-2222222222222222-01"},
			{"name": "tracestate", "value": "evil=1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return server.StaticTool{Manifest: b}
}

func newTracing(t *testing.T, endpoint string, noHeader ...string) *server.Tracing {
	t.Helper()
	var entries []egress.Entry
	for _, d := range noHeader {
		e, err := egress.ParseEntry(d)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	tr, err := server.NewTracing(context.Background(), server.TracingOptions{Endpoint: endpoint, NoTraceparent: entries, ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// waitSpans flushes tr and waits until the receiver holds n spans of tid.
func waitSpans(t *testing.T, tr *server.Tracing, rc *otlpReceiver, tid string, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := tr.ForceFlush(ctx)
		cancel()
		if err != nil {
			t.Fatalf("flush: %v", err)
		}
		if sp := rc.trace(tid); len(sp) >= n || time.Now().After(deadline) {
			return sp
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
)

// A call through serve with a Kindgi traceparent: the receiver gets the
// tool.invoke span, child of the caller's span, with the call's attributes,
// and its stage spans as children; the declarative HTTP tool's request is
// a client span, child of the guest run, and the upstream sees a
// traceparent naming that span (not the one the tool's spec set).
func TestTraceOfCallIntoEgress(t *testing.T) {
	rc := startReceiver(t)
	up := startUpstream(t)
	tr := newTracing(t, rc.url)
	ts := startWith(t, loopbackExecutor(t), server.StaticSource{Tools: []server.StaticTool{fetchTool(t, up.url)}}, server.Options{Tracing: tr})

	r := ts.invoke(t, invokeBody("t.fetch", `{}`), "traceparent", "00-"+parentTrace+"-"+parentSpan+"-01")
	if r.status != 200 {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	spans := waitSpans(t, tr, rc, parentTrace, 6)
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	root := byName["tool.invoke"]
	if root == nil {
		t.Fatalf("no tool.invoke span among %d", len(spans))
	}
	id := func(b []byte) string { return hex.EncodeToString(b) }
	if id(root.ParentSpanId) != parentSpan || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("tool.invoke parent %s kind %v, want %s server", id(root.ParentSpanId), root.Kind, parentSpan)
	}
	for k, want := range map[string]string{"tool.id": "t.fetch", "tool.version": "1.2.3", "tool.posture": "context-isolated", "outcome.code": "ok"} {
		if got := spanAttr(root, k); got != want {
			t.Errorf("tool.invoke %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"usage.cpuMs", "usage.fuel", "usage.peakMemMB"} {
		if spanAttr(root, k) == "" {
			t.Errorf("tool.invoke lacks %s", k)
		}
	}
	for _, name := range []string{"admission.wait", "input.validation", "guest.run", "output.validation"} {
		s := byName[name]
		if s == nil {
			t.Errorf("no %s span", name)
			continue
		}
		if id(s.ParentSpanId) != id(root.SpanId) {
			t.Errorf("%s parent %s, want tool.invoke %s", name, id(s.ParentSpanId), id(root.SpanId))
		}
	}
	get := byName["GET"]
	if get == nil || byName["guest.run"] == nil {
		t.Fatalf("no egress span (spans %v)", names(spans))
	}
	if get.Kind != tracepb.Span_SPAN_KIND_CLIENT || id(get.ParentSpanId) != id(byName["guest.run"].SpanId) ||
		spanAttr(get, "http.response.status_code") != "200" || spanAttr(get, "server.address") != "api.test" {
		t.Errorf("egress span kind %v parent %s attrs %v", get.Kind, id(get.ParentSpanId), get.Attributes)
	}
	tp, tstate := up.last(t)
	if want := "00-" + parentTrace + "-" + id(get.SpanId) + "-01"; tp != want {
		t.Errorf("upstream traceparent %q, want %q (the egress span's)", tp, want)
	}
	if tstate != "" {
		t.Errorf("the tool's own tracestate %q was sent", tstate)
	}
	var log strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&log, "  %-17s %-6s span %s parent %s", s.Name, strings.TrimPrefix(s.Kind.String(), "SPAN_KIND_"), id(s.SpanId), id(s.ParentSpanId))
		for _, kv := range s.Attributes {
			v, _ := protojson.Marshal(kv.Value)
			fmt.Fprintf(&log, " %s=%s", kv.Key, v)
		}
		log.WriteString("\n")
	}
	t.Logf("trace %s as received (%d export requests):\n%s  upstream saw traceparent: %s", parentTrace, len(rc.reqs), log.String(), tp)
}

func names(spans []*tracepb.Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// The stages of a reactor: instance acquisition says its path, and a call
// without a traceparent starts a trace of its own.
func TestTraceStagesOfReactor(t *testing.T) {
	rc := startReceiver(t)
	tr := newTracing(t, rc.url)
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{Tracing: tr})
	const tid = "0af7651916cd43dd8448eb211c80319c"
	r := ts.invoke(t, invokeBody("t.echo", `{"name":"x"}`), "traceparent", "00-"+tid+"-b7ad6b7169203331-01")
	if r.status != 200 {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	spans := waitSpans(t, tr, rc, tid, 6)
	var acq *tracepb.Span
	for _, s := range spans {
		if s.Name == "instance.acquire" {
			acq = s
		}
	}
	if acq == nil {
		t.Fatalf("no instance.acquire span in %v", names(spans))
	}
	switch p := spanAttr(acq, "instance.acquisition"); p {
	case "pooled", "recycled", "image", "instantiated":
	default:
		t.Errorf("instance.acquisition %q", p)
	}
	// A failing call: its outcome code, and an error status.
	r = ts.invoke(t, invokeBody("t.echo", `{}`), "traceparent", "00-"+strings.Repeat("ab", 16)+"-b7ad6b7169203331-01")
	if r.status != 200 && r.status != 400 && r.status != 422 {
		t.Logf("status %d", r.status)
	}
	spans = waitSpans(t, tr, rc, strings.Repeat("ab", 16), 3)
	for _, s := range spans {
		if s.Name == "tool.invoke" {
			if got := spanAttr(s, "outcome.code"); got != "input-validation-failed" || s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("failed call: outcome.code %q status %v", got, s.Status)
			}
			return
		}
	}
	t.Errorf("no tool.invoke span for the failed call: %v", names(spans))
}

// --otlp-no-traceparent: the request to that destination carries no
// traceparent (its span is still recorded); a tool's own is dropped too.
func TestNoTraceparentDestination(t *testing.T) {
	rc := startReceiver(t)
	up := startUpstream(t)
	tr := newTracing(t, rc.url, "api.test:"+up.port)
	ts := startWith(t, loopbackExecutor(t), server.StaticSource{Tools: []server.StaticTool{fetchTool(t, up.url)}}, server.Options{Tracing: tr})
	r := ts.invoke(t, invokeBody("t.fetch", `{}`), "traceparent", "00-"+parentTrace+"-"+parentSpan+"-01")
	if r.status != 200 {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	if tp, tstate := up.last(t); tp != "" || tstate != "" {
		t.Errorf("upstream got traceparent %q tracestate %q, want none", tp, tstate)
	}
	spans := waitSpans(t, tr, rc, parentTrace, 6)
	found := false
	for _, s := range spans {
		found = found || s.Name == "GET"
	}
	if !found {
		t.Errorf("no egress span: %v", names(spans))
	}
}

// Without tracing, a tool's own traceparent is dropped all the same: a
// guest never sets a call's trace context.
func TestGuestTraceparentDroppedWithoutTracing(t *testing.T) {
	up := startUpstream(t)
	ts := startWith(t, loopbackExecutor(t), server.StaticSource{Tools: []server.StaticTool{fetchTool(t, up.url)}}, server.Options{})
	r := ts.invoke(t, invokeBody("t.fetch", `{}`), "traceparent", "00-"+parentTrace+"-"+parentSpan+"-01")
	if r.status != 200 {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	if tp, tstate := up.last(t); tp != "" || tstate != "" {
		t.Errorf("upstream got traceparent %q tracestate %q, want none", tp, tstate)
	}
}

// The same from a WebAssembly guest's own http_request (the Go SDK's
// transport): the upstream sees the egress span's traceparent, not the
// one the guest set. Skipped under -short (a 10 MB standard-Go guest).
func TestTraceOfGuestHTTPRequest(t *testing.T) {
	rc := startReceiver(t)
	up := startUpstream(t)
	tr := newTracing(t, rc.url)
	st := tool(t, "t.gofetch", "http_fetch_reactor", 128, 10000, map[string]any{
		"network": map[string]any{"kind": "allowlist", "hosts": []string{"api.test:" + up.port}}})
	ts := startWith(t, loopbackExecutor(t), server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{Tracing: tr})
	in, _ := json.Marshal(map[string]any{"url": up.url + "/items", "headers": map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}})
	r := ts.invoke(t, invokeBody("t.gofetch", string(in)), "traceparent", "00-"+parentTrace+"-"+parentSpan+"-01")
	if r.status != 200 {
		t.Fatalf("invoke: %d %s", r.status, r.body)
	}
	spans := waitSpans(t, tr, rc, parentTrace, 7)
	var get, run *tracepb.Span
	for _, s := range spans {
		switch s.Name {
		case "GET":
			get = s
		case "guest.run":
			run = s
		}
	}
	if get == nil || run == nil {
		t.Fatalf("spans %v", names(spans))
	}
	if hex.EncodeToString(get.ParentSpanId) != hex.EncodeToString(run.SpanId) {
		t.Errorf("egress span's parent is not the guest run")
	}
	tp, _ := up.last(t)
	if want := "00-" + parentTrace + "-" + hex.EncodeToString(get.SpanId) + "-01"; tp != want {
		t.Errorf("upstream traceparent %q, want %q", tp, want)
	}
}

func TestTracingConfigured(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if server.TracingConfigured("") {
		t.Error("on without an endpoint")
	}
	if !server.TracingConfigured("http://127.0.0.1:4318") {
		t.Error("off with --otlp-endpoint")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	if !server.TracingConfigured("") {
		t.Error("off with OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if server.TracingConfigured("http://127.0.0.1:4318") {
		t.Error("on with OTEL_SDK_DISABLED=true")
	}
	if _, err := server.NewTracing(context.Background(), server.TracingOptions{Endpoint: "collector:4318"}); err == nil {
		t.Error("an endpoint without a scheme is accepted")
	}
}
