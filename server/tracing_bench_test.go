package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/server"
)

// BenchmarkTracing is BenchmarkServeVsFloor's serve side (a 1 KiB
// validated echo over loopback keep-alive, c=1) without tracing and with
// it on, exporting over OTLP/HTTP to a receiver on loopback in this
// process (decoding every batch): the cost of the spans per call.
//
//	go test -run '^$' -bench Tracing -benchmem -benchtime 3000x -count 3 ./server
func BenchmarkTracing(b *testing.B) {
	in := `{"data":"` + strings.Repeat("x", 1024) + `"}`
	st := tool(b, "bench.echo", "echo_reactor", 64, 5000, map[string]any{
		"input":  json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
		"output": json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
	})
	body := []byte(invokeBody("bench.echo", in))
	b.Run("off", func(b *testing.B) {
		ts := start(b, server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{MaxConcurrency: 16})
		loadLoop(b, ts.url+"/v1/invoke", body, 1)
	})
	b.Run("on", func(b *testing.B) {
		rc := startReceiver(b)
		tr, err := server.NewTracing(b.Context(), server.TracingOptions{Endpoint: rc.url})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Shutdown(b.Context())
		ts := start(b, server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{MaxConcurrency: 16, Tracing: tr})
		loadLoop(b, ts.url+"/v1/invoke", body, 1)
	})
}
