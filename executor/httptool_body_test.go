package executor_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestHTTPToolBodyBounded: a declarative HTTP tool's request body is built
// on the call's CPU clock and under its deadline, stopped within stopBound
// of the limit, and the upstream is never reached then (issue 24); so are
// the URL's and headers' fills. Before,
// the body was built uncharged after the host work: a 64 MiB string under
// cpuMs 20 was sent (the call answered, usage.cpuMs only the decoding), and
// a text template repeating a 1 MiB value 100 times was built whole past a
// 20 ms deadline; a path placeholder's checks of an 8 MiB value ran
// uncharged (about 100 ms).
func TestHTTPToolBodyBounded(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	base := "http://api.test:" + serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithEgressLimits(egress.Limits{MaxBodyBytes: 256 << 20})
	})
	// cpuLimit is the cpuMs of the CPU rows: well under what the smallest
	// body here costs on an idle machine (the 8 MiB passthrough: about 14
	// ms; with cpuMs 20 it answered at 20.8 ms of usage, input validation
	// included). limit is the deadline's ms.
	const cpuLimit, limit = 5, 20
	// 8 MiB: its decoding for the templates (charged before, as the body
	// is now) takes well under cpuMs; the old body passes took 40+ ms.
	big := []byte(`{"s":"` + strings.Repeat("a", 8<<20) + `"}`)
	small := []byte(`{"s":"` + strings.Repeat("a", 1<<20) + `"}`)
	cases := []struct {
		name  string
		body  map[string]any // spec.requestBody; nil: POST's json-input
		input []byte
		get   string // a GET's urlTemplate path, "": a POST to /sink
	}{
		{"json-input 8 MiB string", nil, big, ""},
		{"input-passthrough 8 MiB string", map[string]any{"kind": "input-passthrough"}, big, ""},
		{"text 100 x 1 MiB value", map[string]any{"kind": "text", "template": strings.Repeat("{s}", 100)}, small, ""},
		{"URL path placeholder of an 8 MiB string", nil, big, "/sink/{s}"},
	}
	for _, c := range cases {
		spec := map[string]any{"kind": "http", "method": "POST", "urlTemplate": base + "/sink"}
		if c.get != "" {
			spec = map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + c.get}
		}
		if c.body != nil {
			spec["requestBody"] = c.body
		}
		cc := executor.CallContext{TenantID: "t", RunID: "r"}
		// The control: the same input to a GET tool (no body) fits cpuMs,
		// so a stop below is the body's.
		ctl := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/sink"},
			func(m map[string]any) { m["limits"] = map[string]any{"memMB": 512, "cpuMs": cpuLimit} })
		if res, err := ctl.Invoke(context.Background(), executor.Request{Input: c.input, Context: cc}); err != nil {
			t.Logf("%s: the control (no body) failed: %v: the machine is too loaded for this row to show the body's stop", c.name, err)
		} else {
			t.Logf("%s: the control (no body) answered, usage.cpuMs %.1f", c.name, res.Usage.CPUMs)
		}
		hits.Store(0)
		cpuTool := loadHTTPTool(t, e, spec, func(m map[string]any) { m["limits"] = map[string]any{"memMB": 512, "cpuMs": cpuLimit} })
		res, err := cpuTool.Invoke(context.Background(), executor.Request{Input: c.input, Context: cc})
		if err == nil {
			t.Errorf("%s, cpuMs %d: answered (usage.cpuMs %.1f, upstream hits %d); want limits-exceeded cpuMs", c.name, cpuLimit, res.Usage.CPUMs, hits.Load())
		} else {
			te := wantCode(t, err, toolerr.LimitsExceeded)
			obs, _ := te.Details["observed"].(int64)
			if te.Details["limit"] != "cpuMs" || res == nil || !strings.Contains(te.Message, "the HTTP tool's host work") {
				t.Fatalf("%s: want limits-exceeded cpuMs of the host work, with usage: %s %v %+v", c.name, te.Message, te.Details, res)
			}
			t.Logf("%s, cpuMs %d: stopped at %d ms of host work (usage.cpuMs %.1f, input validation included)", c.name, cpuLimit, obs, res.Usage.CPUMs)
			if obs > cpuLimit+stopBound || res.Usage.CPUMs < cpuLimit {
				t.Errorf("%s: stopped at %d ms, usage.cpuMs %.1f; want within %d ms of cpuMs %d, charged", c.name, obs, res.Usage.CPUMs, stopBound, cpuLimit)
			}
		}
		if n := hits.Swap(0); n != 0 {
			t.Errorf("%s, cpuMs %d: the upstream was reached %d times; want none", c.name, cpuLimit, n)
		}
		if len(c.input) == len(big) {
			continue // its input validation alone can take 20 ms of wall time: the deadline row is the text one
		}
		wallTool := loadHTTPTool(t, e, spec, func(m map[string]any) { m["limits"] = map[string]any{"memMB": 512, "cpuMs": 600_000} })
		ctx, cancel := context.WithTimeout(context.Background(), limit*time.Millisecond)
		start := time.Now()
		_, err = wallTool.Invoke(ctx, executor.Request{Input: c.input, Context: cc})
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s, deadline %d ms: answered after %v; want deadline-exceeded", c.name, limit, took)
		} else {
			wantCode(t, err, toolerr.DeadlineExceeded)
		}
		t.Logf("%s, deadline %d ms: returned after %v", c.name, limit, took)
		if took > (limit+stopBound)*time.Millisecond {
			t.Errorf("%s: returned %v after the call began; want within %d ms of its %d ms deadline", c.name, took, stopBound, limit)
		}
		if n := hits.Swap(0); n != 0 {
			t.Errorf("%s, deadline: the upstream was reached %d times; want none", c.name, n)
		}
	}
}

// TestHTTPToolBodyMemMBAsItGrows: a text template repeating a 1 MiB value
// 200 times is refused at memMB as the body grows, not built whole first
// (before: 200 MiB built, then refused; 400+ MiB allocated).
func TestHTTPToolBodyMemMBAsItGrows(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	e := newExecutor(t, loopbackEgress)
	tool := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "POST", "urlTemplate": "http://api.test:" + serverPort(t, srv) + "/sink",
		"requestBody": map[string]any{"kind": "text", "template": strings.Repeat("{s}", 200)}},
		func(m map[string]any) { m["limits"] = map[string]any{"memMB": 32, "cpuMs": 10_000} })
	input := []byte(`{"s":"` + strings.Repeat("a", 1<<20) + `"}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := tool.Invoke(context.Background(), executor.Request{Input: input, Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	runtime.ReadMemStats(&after)
	te := wantCode(t, err, toolerr.LimitsExceeded)
	if te.Details["limit"] != "memMB" || !strings.Contains(te.Message, "the request body") || res == nil || res.Usage.PeakMemMB > 32 {
		t.Fatalf("want limits-exceeded memMB for the request body, peak within memMB: %s %v %+v", te.Message, te.Details, res)
	}
	alloc := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("%s (peakMemMB %.2f, %d MiB allocated)", te.Message, res.Usage.PeakMemMB, alloc)
	if alloc > 128 {
		t.Errorf("the call allocated %d MiB; want the body refused as it grows past memMB 32", alloc)
	}
	if hits.Load() != 0 {
		t.Errorf("the upstream was reached")
	}
}
