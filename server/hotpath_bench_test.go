package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// discardWriter is a ResponseWriter that keeps the status and drops the
// body, allocating nothing per call (its header map is reused). Like
// net/http's, it supports read deadlines and flushing (a no-op here):
// without them http.ResponseController answers ErrNotSupported wrapped
// by fmt.Errorf, allocations net/http's server does not make.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header               { return w.h }
func (w *discardWriter) WriteHeader(s int)                 { w.status = s }
func (w *discardWriter) SetReadDeadline(t time.Time) error { return nil }
func (w *discardWriter) FlushError() error                 { return nil }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	w.n += len(p)
	return len(p), nil
}

// BenchmarkServeHTTPEcho is the served path without the network: one
// /v1/invoke of a 1 KiB validated echo (WAT, context-isolated) straight
// into Server.ServeHTTP, call records written by NewLogger into
// io.Discard; allocs/op are the server's and the executor's alone (the
// request, built once per call here, adds 3); cpu-ns/op is the process's
// CPU time per call (the GC's and the guest worker's included).
//
//	go test -run '^$' -bench ServeHTTPEcho -benchmem ./server
func BenchmarkServeHTTPEcho(b *testing.B) {
	in := `{"data":"` + strings.Repeat("x", 1024) + `"}`
	st := tool(b, "bench.echo", "echo_reactor", 64, 5000, map[string]any{
		"input":  json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
		"output": json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
	})
	srv, err := server.New(context.Background(), newExecutor(b, executor.NewConfig()), server.StaticSource{Tools: []server.StaticTool{st}},
		server.Options{Token: token, Log: server.NewLogger(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close(context.Background()) })
	body := []byte(invokeBody("bench.echo", in))
	rd := bytes.NewReader(body)
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/invoke", rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("kindgi-pack-token", token)
	w := &discardWriter{h: http.Header{}}
	call := func() {
		rd.Reset(body)
		r := req.Clone(context.Background())
		r.Body = io.NopCloser(rd)
		r.ContentLength = int64(len(body))
		clear(w.h)
		w.status, w.n = 0, 0
		srv.ServeHTTP(w, r)
		if w.status != 200 || w.n < 1024 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
	for i := 0; i < 20; i++ {
		call()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		call()
	}
	// Process CPU per call besides ns/op: on a shared machine the wall
	// time of a call that hands work to another goroutine (the guest
	// worker) varies with everyone's load far more than its CPU does.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
