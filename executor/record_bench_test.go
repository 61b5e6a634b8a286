package executor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// BenchmarkRecord measures what recording costs a call (docs/replay.md;
// the bound is 10 %): a 1 KiB echo (WAT reactor, context-isolated,
// pooled) and a Go guest's call with one loopback HTTP exchange: off;
// recorded on a fresh instance (an executor without WithRecordable);
// recorded on pooled instances (WithRecordable), kept and written to
// io.Discard, or discarded as serve --record-failures discards a
// successful call's; unrecorded on a recordable executor; and replayed.
func BenchmarkRecord(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items":[1,2,3]}`)
	}))
	defer srv.Close()
	port := serverPort(b, srv)
	echoIn := []byte(`{"data":"` + strings.Repeat("x", 1000) + `"}`)
	for _, tc := range []struct {
		name, fixture string
		edit          func(m map[string]any)
		input         []byte
	}{
		{"echo-1KiB", "echo_reactor", nil, echoIn},
		{"http-1-exchange", "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port), []byte(fetchInput("http://api.test:"+port+"/", nil))},
	} {
		e := newExecutor(b, loopbackEgress, func(c executor.Config) executor.Config { return c.WithPoolSize(2) })
		tool := load(b, e, tc.fixture, tc.edit)
		re := newExecutor(b, loopbackEgress, func(c executor.Config) executor.Config { return c.WithPoolSize(2).WithRecordable(true) })
		rtool := load(b, re, tc.fixture, tc.edit)
		req := executor.Request{Input: tc.input, Context: executor.CallContext{TenantID: "t", RunID: "r"}}
		for _, tl := range []*executor.Tool{tool, rtool} {
			if _, err := tl.Invoke(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
		call := func(b *testing.B, tl *executor.Tool, record, write bool) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r := req
				if record {
					r.Record = executor.NewRecorder(executor.RecordOptions{})
				}
				if _, err := tl.Invoke(context.Background(), r); err != nil {
					b.Fatal(err)
				}
				if write {
					if _, err := r.Record.WriteTo(io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		b.Run(tc.name+"/off", func(b *testing.B) { call(b, tool, false, false) })
		b.Run(tc.name+"/record-fresh", func(b *testing.B) { call(b, tool, true, true) })
		b.Run(tc.name+"/recordable-off", func(b *testing.B) { call(b, rtool, false, false) })
		b.Run(tc.name+"/record-pooled", func(b *testing.B) { call(b, rtool, true, true) })
		b.Run(tc.name+"/record-pooled-unwritten", func(b *testing.B) { call(b, rtool, true, false) })
		rec := executor.NewRecorder(executor.RecordOptions{})
		r := req
		r.Record = rec
		if _, err := tool.Invoke(context.Background(), r); err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		rec.WriteTo(&sb)
		parsed, err := executor.ReadRecording(strings.NewReader(sb.String()))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/replay", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				rep, err := tool.Replay(context.Background(), parsed)
				if err != nil || !rep.Identical {
					b.Fatalf("%v %q", err, rep.Divergence)
				}
			}
		})
	}
}
