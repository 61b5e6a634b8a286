package mcp_test

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxd/sandboxd/server"
)

// With tracing on, an MCP call's _meta.traceparent is the parent of its
// tool.invoke span.
func TestMetaTraceparentParentsSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := server.NewTracing(context.Background(), server.TracingOptions{Processor: sdktrace.NewSimpleSpanProcessor(exp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	f := newFixture(t, tools(t), server.Options{Tracing: tr})
	cs := f.connect(t, "2025-11-25", nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "p"},
		Meta: sdk.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	for _, s := range exp.GetSpans() {
		if s.Name != "tool.invoke" {
			continue
		}
		if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
			t.Errorf("tool.invoke trace %s parent %s", s.SpanContext.TraceID(), s.Parent.SpanID())
		}
		return
	}
	t.Errorf("no tool.invoke span among %d", len(exp.GetSpans()))
}
