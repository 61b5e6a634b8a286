package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/server"
)

func TestInvokeEcho(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t), PackID: "acme", PackVersion: "1.2.3", ArtifactVersion: "20260920.1"}, server.Options{})
	r := ts.invoke(t, invokeBody("acme.echo", `{"message":"hi","repeat":3}`),
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "kindgi-request-id", "req-9")
	wantResult(t, r, `{"echo":"hihihi","length":6}`)
	if got := r.header.Get("kindgi-artifact-version"); got != "20260920.1" {
		t.Errorf("kindgi-artifact-version %q", got)
	}
	var u map[string]float64
	if err := json.Unmarshal([]byte(r.header.Get("sandboxd-usage")), &u); err != nil || u["wallMs"] <= 0 {
		t.Errorf("sandboxd-usage %q", r.header.Get("sandboxd-usage"))
	}
	if !bytes.Equal(r.body, []byte(`{"v":2,"kind":"result","output":{"echo":"hihihi","length":6}}`+"\n")) {
		t.Errorf("body %q", r.body)
	}
	calls := ts.logs.records(t, "call")
	if len(calls) != 1 {
		t.Fatalf("call records: %s", ts.logs.String())
	}
	c := calls[0]
	for k, v := range map[string]any{"id": "acme.echo", "target": "tool", "outcome": "ok", "tenantId": "t1", "runId": "r1",
		"requestId": "req-9", "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331"} {
		if c[k] != v {
			t.Errorf("call record %s = %v, want %v", k, c[k], v)
		}
	}
	if _, ok := c["durationMs"].(float64); !ok {
		t.Errorf("call record without durationMs: %v", c)
	}
	if strings.Contains(ts.logs.String(), "hihihi") || strings.Contains(ts.logs.String(), token) {
		t.Error("a payload or the token reached the process log")
	}
}

// Unknown ctx fields are accepted; nested input defaults are filled before
// the guest sees the input (echo_reactor returns its input).
func TestInputDefaultsAndOpenContext(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	r := ts.invoke(t, `{"v":2,"kind":"invoke","tool":{"id":"t.echo","version":"1.0.0"},"input":{"name":"x"},`+
		`"ctx":{"tenantId":"t1","runId":"r1","projectId":"p","orgId":"o","requestId":"q","idempotencyKey":"6f1c1f0e-8f5e-5b8a-9c3e-2f0e4b1d7a11","settings":{"b":{"k":1}},"env":{},"secrets":{},"futureField":{"x":1}}}`)
	wantResult(t, r, `{"name":"x","opts":{"depth":3}}`)
}

func TestInfoAndTools(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t), PackID: "acme", PackVersion: "1.2.3", ArtifactVersion: "a1"}, server.Options{})
	r, err := do(t, context.Background(), "GET", ts.url+"/v1/info", nil, authJSON())
	if err != nil || r.status != 200 {
		t.Fatalf("%v %v", err, r)
	}
	validate(t, "info", r.body)
	m := r.msg(t)
	if m["packId"] != "acme" || m["packVersion"] != "1.2.3" || m["artifactVersion"] != "a1" || m["protocol"] != 2.0 {
		t.Errorf("info %s", r.body)
	}
	if !strings.Contains(string(r.body), `{"id":"acme.echo","version":"1.0.0"}`) {
		t.Errorf("info tools %s", r.body)
	}
	r, err = do(t, context.Background(), "GET", ts.url+"/v1/tools", nil, authJSON())
	if err != nil || r.status != 200 {
		t.Fatalf("%v %v", err, r)
	}
	var tools struct {
		Tools []server.ToolInfo
	}
	if err := json.Unmarshal(r.body, &tools); err != nil || len(tools.Tools) != len(standardTools(t)) {
		t.Fatalf("tools %s", r.body)
	}
	for _, ti := range tools.Tools {
		if !strings.HasPrefix(ti.Digest, "sha256:") || ti.Posture == "" || ti.Limits.MemMB == 0 || len(ti.Input) == 0 || ti.Style == "" {
			t.Errorf("tool %+v", ti)
		}
	}
	for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/readyz": `{"status":"ready"}`} {
		r, err := do(t, context.Background(), "GET", ts.url+path, nil, nil)
		if err != nil || r.status != 200 || strings.TrimSpace(string(r.body)) != want {
			t.Errorf("%s: %v %v", path, err, r)
		}
	}
}

func TestTransportStatuses(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	body := invokeBody("acme.echo", `{"message":"x"}`)
	big := strings.Repeat(" ", server.MaxBodyBytes) + body
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		chunked                  bool
		want                     int
	}{
		{"unknown route", "GET", "/v2/invoke", "", authJSON(), false, 404},
		{"root", "GET", "/", "", nil, false, 404},
		{"GET invoke (405 before auth)", "GET", "/v1/invoke", "", nil, false, 405},
		{"PUT invoke", "PUT", "/v1/invoke", body, authJSON(), false, 405},
		{"POST info", "POST", "/v1/info", body, authJSON(), false, 405},
		{"POST healthz", "POST", "/healthz", "", nil, false, 405},
		{"missing token", "POST", "/v1/invoke", body, map[string]string{"content-type": "application/json"}, false, 401},
		{"wrong token", "POST", "/v1/invoke", body, authJSON("kindgi-pack-token", token+"x"), false, 401},
		{"token prefix", "POST", "/v1/invoke", body, authJSON("kindgi-pack-token", token[:4]), false, 401},
		{"Authorization is not the token", "POST", "/v1/invoke", body, map[string]string{"content-type": "application/json", "authorization": "Bearer " + token}, false, 401},
		{"info without token", "GET", "/v1/info", "", nil, false, 401},
		{"tools without token", "GET", "/v1/tools", "", nil, false, 401},
		{"no content type", "POST", "/v1/invoke", body, map[string]string{"kindgi-pack-token": token}, false, 415},
		{"text/plain", "POST", "/v1/invoke", body, authJSON("content-type", "text/plain"), false, 415},
		{"json with charset", "POST", "/v1/invoke", body, authJSON("content-type", "application/json; charset=utf-8"), false, 200},
		{"over 10 MiB", "POST", "/v1/invoke", big, authJSON(), false, 413},
		{"over 10 MiB chunked", "POST", "/v1/invoke", big, authJSON(), true, 413},
		{"healthz without token", "GET", "/healthz", "", nil, false, 200},
		{"metrics without token", "GET", "/metrics", "", nil, false, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rd io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				rd = io.MultiReader(rd) // hides the length: sent chunked
			}
			r, err := do(t, context.Background(), tc.method, ts.url+tc.path, rd, tc.hdr)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tc.want {
				t.Fatalf("status %d, want %d: %s", r.status, tc.want, r.body)
			}
			if tc.path == "/v1/invoke" {
				checkAnswer(t, r)
			}
			if r.status == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
}

// Every malformed frame kind is a 200 error message with the right code.
func TestMalformedFrames(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	ctx := `"ctx":{"tenantId":"t","runId":"r"}`
	for _, tc := range []struct{ name, body, code string }{
		{"empty body", ``, "malformed-message"},
		{"not JSON", `{"v":2,`, "malformed-message"},
		{"trailing data", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{"message":"x"},` + ctx + `} {}`, "malformed-message"},
		{"array", `[1,2]`, "malformed-message"},
		{"null", `null`, "malformed-message"},
		{"string", `"invoke"`, "malformed-message"},
		{"no v", `{"kind":"invoke","tool":{"id":"acme.echo"},"input":{},` + ctx + `}`, "malformed-message"},
		{"v 1", `{"v":1,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},` + ctx + `}`, "unknown-protocol-version"},
		{"v 3", `{"v":3,"kind":"invoke"}`, "unknown-protocol-version"},
		{"v string", `{"v":"2","kind":"invoke","tool":{"id":"acme.echo"},"input":{},` + ctx + `}`, "unknown-protocol-version"},
		{"no kind", `{"v":2,"tool":{"id":"acme.echo"},"input":{},` + ctx + `}`, "malformed-message"},
		{"kind number", `{"v":2,"kind":7}`, "malformed-message"},
		{"kind result", `{"v":2,"kind":"result","output":{}}`, "unexpected-message-kind"},
		{"kind error", `{"v":2,"kind":"error","code":"cancelled","message":"x"}`, "unexpected-message-kind"},
		{"unknown field", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},` + ctx + `,"extra":1}`, "malformed-message"},
		{"no tool", `{"v":2,"kind":"invoke","input":{},` + ctx + `}`, "malformed-message"},
		{"tool string", `{"v":2,"kind":"invoke","tool":"acme.echo","input":{},` + ctx + `}`, "malformed-message"},
		{"tool id empty", `{"v":2,"kind":"invoke","tool":{"id":""},"input":{},` + ctx + `}`, "malformed-message"},
		{"tool id number", `{"v":2,"kind":"invoke","tool":{"id":5},"input":{},` + ctx + `}`, "malformed-message"},
		{"tool extra field", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo","digest":"x"},"input":{},` + ctx + `}`, "malformed-message"},
		{"tool version number", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo","version":1},"input":{},` + ctx + `}`, "malformed-message"},
		{"no input", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},` + ctx + `}`, "malformed-message"},
		{"no ctx", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{}}`, "malformed-message"},
		{"ctx array", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":[]}`, "malformed-message"},
		{"no tenantId", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":{"runId":"r"}}`, "malformed-message"},
		{"runId number", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":{"tenantId":"t","runId":1}}`, "malformed-message"},
		{"env not strings", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":{"tenantId":"t","runId":"r","env":{"A":1}}}`, "malformed-message"},
		{"settings not objects", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":{"tenantId":"t","runId":"r","settings":{"a":1}}}`, "malformed-message"},
		{"check-invoke", `{"v":2,"kind":"check-invoke","check":{"id":"no-pii"},"config":{},"trace":{}}`, "check-not-in-pack"},
		{"check-invoke without trace", `{"v":2,"kind":"check-invoke","check":{"id":"no-pii"},"config":{}}`, "malformed-message"},
		{"check-invoke config array", `{"v":2,"kind":"check-invoke","check":{"id":"c"},"config":[],"trace":{}}`, "malformed-message"},
		{"unknown tool", invokeBody("acme.nope", `{}`), "tool-not-in-pack"},
		{"version mismatch", `{"v":2,"kind":"invoke","tool":{"id":"acme.echo","version":"9.9.9"},"input":{"message":"x"},` + ctx + `}`, "tool-version-mismatch"},
		{"input invalid", invokeBody("acme.echo", `{"repeat":0,"extra":true}`), "input-validation-failed"},
		{"input null", invokeBody("acme.echo", `null`), "input-validation-failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := wantError(t, ts.invoke(t, tc.body), tc.code)
			switch tc.code {
			case "tool-not-in-pack", "tool-version-mismatch", "input-validation-failed":
				if m["toolId"] == nil {
					t.Errorf("no toolId: %v", m)
				}
			case "check-not-in-pack":
				if m["checkId"] != "no-pii" {
					t.Errorf("checkId: %v", m)
				}
			}
		})
	}
}

// Ajv-shaped issues: required at the parent's instancePath with
// missingProperty; additionalProperties with additionalProperty.
func TestValidationIssues(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	r := ts.invoke(t, invokeBody("acme.echo", `{"extra":1}`))
	wantError(t, r, "input-validation-failed")
	b := r.body
	for _, want := range []string{
		`"instancePath":"","schemaPath":"#/required","keyword":"required","params":{"missingProperty":"message"}`,
		`"keyword":"additionalProperties","params":{"additionalProperty":"extra"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("issues %s lack %s", b, want)
		}
	}
	m := wantError(t, ts.invoke(t, invokeBody("t.badout", `{}`)), "output-validation-failed")
	if b, _ := json.Marshal(m["issues"]); !strings.Contains(string(b), `"missingProperty":"echo"`) {
		t.Errorf("output issues %s", b)
	}
}

// Native codes outside the enum travel in cause.
func TestWireFaceMapping(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	for _, tc := range []struct {
		tool, code, cause string
		fields            map[string]any
	}{
		{"t.trap", "handler-throw", "handler-trap", map[string]any{"trap": "unreachable"}},
		{"t.spin", "handler-throw", "limits-exceeded", map[string]any{"limit": "cpuMs", "declared": 50.0}},
		{"t.membomb", "handler-throw", "limits-exceeded", map[string]any{"limit": "memMB", "declared": 16.0}},
		{"t.declared", "handler-throw", "handler-error", map[string]any{"handlerCode": "not-found", "message": "no such item"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			r := ts.invoke(t, invokeBody(tc.tool, `{}`))
			m := wantError(t, r, tc.code)
			c, ok := m["cause"].(map[string]any)
			if !ok || c["name"] != tc.cause {
				t.Fatalf("cause %v", m["cause"])
			}
			for k, v := range tc.fields {
				if c[k] != v {
					t.Errorf("cause.%s = %v, want %v", k, c[k], v)
				}
			}
			if m["toolId"] != tc.tool || r.header.Get("sandboxd-usage") == "" {
				t.Errorf("toolId %v, usage %q", m["toolId"], r.header.Get("sandboxd-usage"))
			}
		})
	}
	for _, c := range []struct {
		native string
		wire   server.WireCode
		ok     bool
	}{
		{"artifact-refused", server.WireHandlerImportFailed, true},
		{"level-not-supported", server.WireHandlerImportFailed, true},
		{"policy-refused", server.WireHandlerImportFailed, true},
		{"invalid-tool-definition", server.WireHandlerImportFailed, true},
		{"artifact-integrity-failed", server.WireHandlerImportFailed, true},
		{"handler-shape-invalid", server.WireHandlerShapeInvalid, true},
		{"cancelled", server.WireCancelled, true},
		{"internal-error", "", false},
	} {
		got, ok := server.WireCodeOf(toolerrCode(c.native))
		if got != c.wire || ok != c.ok {
			t.Errorf("WireCodeOf(%s) = %s %v", c.native, got, ok)
		}
	}
}

// context-isolated never leaks state: the counter answers 1 every time,
// also under concurrency.
func TestContextIsolatedNeverLeaks(t *testing.T) {
	// 8 clients on one tool: the per-tool cap must admit all 8 (its default,
	// 3/4 of MaxConcurrency, would answer 503 whenever all 8 overlap).
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{MaxConcurrency: 8, PerToolConcurrency: 8})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				r, err := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.counter", `{}`)), authJSON())
				if err != nil {
					errs <- err
					return
				}
				if r.status != 200 || string(r.body) != `{"v":2,"kind":"result","output":{"count":1}}`+"\n" {
					errs <- fmt.Errorf("%d %s", r.status, r.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The answer goes out at the deadline while the guest still spins.
func TestDeadlineAnsweredWhileGuestSpins(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	began := time.Now()
	r := ts.invoke(t, invokeBody("t.loop", `{}`), "kindgi-timeout-ms", "300")
	took := time.Since(began)
	wantError(t, r, "deadline-exceeded")
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered after %v for a 300 ms deadline", took)
	}
	// The guest is stopped: its slot comes back.
	eventually(t, "the spinning guest to stop", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "0" })
	calls := ts.logs.records(t, "call")
	if len(calls) != 1 || calls[0]["outcome"] != "deadline-exceeded" {
		t.Errorf("call records %v", calls)
	}
	// An invalid timeout means 120000 ms: the call still completes.
	wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`), "kindgi-timeout-ms", "soon"), "")
}

// A client that goes away cancels its guest; the call is recorded as
// cancelled.
func TestDisconnectCancels(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := do(t, ctx, "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)), authJSON())
		errc <- err
	}()
	eventually(t, "the call to run", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	eventually(t, "the cancelled call's record", func() bool { return len(ts.logs.records(t, "call")) == 1 })
	if rec := ts.logs.records(t, "call")[0]; rec["outcome"] != "cancelled" {
		t.Errorf("record %v", rec)
	}
	eventually(t, "the guest to stop", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "0" })
}

// Saturation: beyond the cap and the queue, 503 + Retry-After at once; the
// service recovers when the held calls end. The per-tool cap leaves room
// for other tools; a call to a tool at its cap waits for the tool's slot.
func TestSaturationAndRecovery(t *testing.T) {
	// t.loop2 holds the second slot for its whole deadline (t.spin would
	// give it back after 50 ms of CPU, sometimes before the burst arrives).
	tools := append(standardTools(t), tool(t, "t.loop2", "loop", 16, 600_000, nil))
	ts := start(t, server.StaticSource{Tools: tools}, server.Options{MaxConcurrency: 2, QueueSize: 1, PerToolConcurrency: 1, PerTenantConcurrency: 2})
	hold := func(ms int) chan *response {
		ch := make(chan *response, 1)
		go func() {
			r, err := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)),
				authJSON("kindgi-timeout-ms", fmt.Sprint(ms)))
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
		return ch
	}
	// long enough to outlast the steps below under -race on a loaded machine
	// (2.5 s without -race: both held guests spin until their deadline)
	heldMs, held2Ms := 4000, "3000"
	if testing.Short() && !raceEnabled {
		heldMs, held2Ms = 2500, "2000"
	}
	held := hold(heldMs)
	eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
	// The per-tool cap (1) makes a second loop call wait for the tool's
	// slot (here until its deadline)…
	r := ts.invoke(t, invokeBody("t.loop", `{}`), "kindgi-timeout-ms", "300")
	if m := wantError(t, r, "deadline-exceeded"); !strings.Contains(fmt.Sprint(m["message"]), "waited for a slot") {
		t.Fatalf("per-tool cap: %s", r.body)
	}
	// …while another tool still runs.
	wantResult(t, ts.invoke(t, invokeBody("t.counter", `{}`)), `{"count":1}`)

	// Fill the second slot and the queue, then the next call is refused.
	held2 := make(chan *response, 1)
	go func() {
		r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop2", `{}`)), authJSON("kindgi-timeout-ms", held2Ms))
		held2 <- r
	}()
	// Both slots must be taken before the burst, or fast echo calls can
	// all pass one after another through the free slot.
	eventually(t, "both slots taken", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "2" })
	var saw503 atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("acme.echo", `{"message":"q"}`)), authJSON())
			if err != nil {
				t.Error(err)
				return
			}
			checkAnswer(t, r)
			if r.status == 503 {
				saw503.Store(true)
			}
		}()
	}
	wg.Wait()
	if !saw503.Load() {
		t.Error("no 503 beyond the cap and the queue")
	}
	for _, ch := range []chan *response{held, held2} {
		if r := <-ch; r == nil || r.status != 200 {
			t.Fatalf("held call: %v", r)
		}
	}
	// Recovery.
	wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"back"}`)), `{"echo":"back","length":4}`)
	full, _ := strconv.Atoi(ts.metric(t, `sandboxd_admission_refused_total{reason="over-capacity"}`))
	tenantFull, _ := strconv.Atoi(ts.metric(t, `sandboxd_admission_refused_total{reason="tenant-queue-full"}`))
	if full+tenantFull == 0 {
		t.Errorf("queue-full refusals not counted")
	}
}

// Many goroutines, mixed tools: hostile guests (spinning, memory-bombing,
// running into their deadline) hammer the service while well-behaved calls
// keep succeeding, every one of them: the per-tool cap keeps the hostile
// tools from taking every slot. Nothing answers 5xx; every answer
// validates.
func TestHammer(t *testing.T) {
	if testing.Short() {
		t.Skip("hammer")
	}
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{MaxConcurrency: 8, QueueSize: 256, PerToolConcurrency: 2})
	stop := make(chan struct{})
	var hostile, refused atomic.Int64
	var hwg sync.WaitGroup
	for g := 0; g < 9; g++ {
		hwg.Add(1)
		go func(g int) {
			defer hwg.Done()
			tool, hdr := []string{"t.spin", "t.membomb", "t.loop"}[g%3], []string{"kindgi-timeout-ms", "200"}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody(tool, `{}`)), authJSON(hdr...))
				if err != nil {
					t.Error(err)
					return
				}
				checkAnswer(t, r)
				switch r.status {
				case 503:
					refused.Add(1)
				case 200:
					if r.msg(t)["kind"] != "error" {
						t.Errorf("%s succeeded: %s", tool, r.body)
					}
					hostile.Add(1)
				default:
					t.Errorf("%s: %d %s", tool, r.status, r.body)
				}
			}
		}(g)
	}
	type job struct{ tool, input, output string }
	jobs := []job{
		{"acme.echo", `{"message":"m","repeat":3}`, `{"echo":"mmm","length":3}`},
		{"t.counter", `{}`, `{"count":1}`},
		{"t.echo", `{"name":"n"}`, `{"name":"n","opts":{"depth":3}}`},
	}
	var ok atomic.Int64
	sandboxtest.Hammer(t, 2*len(jobs), 10, func(g, _ int) { // two clients per tool: never over its cap
		j := jobs[g%len(jobs)]
		r := ts.invoke(t, invokeBody(j.tool, j.input))
		wantResult(t, r, j.output)
		ok.Add(1)
	})
	close(stop)
	hwg.Wait()
	t.Logf("%d well-behaved calls succeeded beside %d hostile calls (%d more refused with 503)", ok.Load(), hostile.Load(), refused.Load())
	if hostile.Load() == 0 {
		t.Error("no hostile call ran")
	}
	eventually(t, "all slots back", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "0" })
}

// Drain keeps the listener open: new calls and /readyz answer 503 while an
// accepted call finishes; then Serve returns.
func TestDrainInProcess(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	holdMs := "1500" // the held guest spins until then
	if testing.Short() && !raceEnabled {
		holdMs = "1000"
	}
	held := make(chan *response, 1)
	go func() {
		r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)), authJSON("kindgi-timeout-ms", holdMs))
		held <- r
	}()
	eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
	ts.cancel()
	eventually(t, "draining", func() bool { return len(ts.logs.records(t, "draining")) == 1 })
	r := ts.invoke(t, invokeBody("acme.echo", `{"message":"late"}`))
	if r.status != 503 {
		t.Errorf("new call while draining: %d", r.status)
	}
	rr, err := do(t, context.Background(), "GET", ts.url+"/readyz", nil, nil)
	if err != nil || rr.status != 503 || rr.header.Get("Retry-After") == "" {
		t.Errorf("readyz while draining: %v %v", err, rr)
	}
	if h := <-held; h == nil || h.status != 200 {
		t.Fatalf("held call lost: %v", h)
	} else {
		checkAnswer(t, h)
	}
	select {
	case err := <-ts.done:
		if err != nil {
			t.Fatal(err)
		}
		ts.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if st := ts.logs.records(t, "stopped"); len(st) != 1 || st[0]["abandoned"] != 0.0 {
		t.Errorf("stopped %v", st)
	}
}

// A drain also waits for a guest that outlives its call (answered at the
// deadline while the interrupted guest stops), so the call's terminal
// lifecycle event is out before Serve returns.
func TestDrainWaitsForGuests(t *testing.T) {
	var mu sync.Mutex
	phases := map[string][]executor.Phase{}
	exec := newExecutor(t, executor.NewConfig().WithCallObserver(func(ev executor.CallEvent) {
		mu.Lock()
		phases[ev.CallID] = append(phases[ev.CallID], ev.Phase)
		mu.Unlock()
	}))
	ts := startWith(t, exec, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	held := make(chan *response, 1)
	go func() {
		r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)), authJSON("kindgi-timeout-ms", "400"))
		held <- r
	}()
	eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
	ts.cancel()
	if h := <-held; h == nil || h.status != 200 || h.msg(t)["code"] != "deadline-exceeded" {
		t.Fatalf("held call: %v", h)
	}
	select {
	case err := <-ts.done:
		ts.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(phases) != 1 {
		t.Fatalf("calls observed: %v", phases)
	}
	for id, ph := range phases {
		if ph[len(ph)-1] != executor.PhaseFailed {
			t.Errorf("call %s: phases %v when Serve returned, want it to end with failed", id, ph)
		}
	}
}

func TestMetricsFormat(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`))
	ts.invoke(t, invokeBody("t.trap", `{}`))
	r, err := do(t, context.Background(), "GET", ts.url+"/metrics", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	body := string(r.body)
	for _, want := range []string{
		`sandboxd_invocations_total{tool="acme.echo",outcome="ok"} 1`,
		`sandboxd_invocations_total{tool="t.trap",outcome="handler-throw"} 1`,
		`sandboxd_invocation_duration_seconds_count{tool="acme.echo"} 1`,
		`sandboxd_invocation_duration_seconds_bucket{tool="acme.echo",le="+Inf"} 1`,
		`# TYPE sandboxd_invocation_duration_seconds histogram`,
		`sandboxd_guest_peak_memory_mb_count{tool="acme.echo"} 1`,
		`sandboxd_queue_depth 0`, `sandboxd_ready 1`, `sandboxd_concurrency_limit 16`,
		`sandboxd_pool_target_instances{tool="acme.echo"} `,
		`# TYPE sandboxd_pool_ready_instances gauge`,
		`# TYPE sandboxd_egress_requests_total counter`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every sample line is NAME{labels} VALUE or NAME VALUE.
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		if strings.HasPrefix(l, "# ") {
			continue
		}
		if f := strings.Fields(l); len(f) != 2 {
			t.Errorf("bad sample line %q", l)
		}
	}
}

func TestTraceparentAndNewRejections(t *testing.T) {
	for _, tc := range []struct{ h, trace string }{
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "0af7651916cd43dd8448eb211c80319c"},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", ""},
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", ""},
		{"garbage", ""},
	} {
		if got := server.ParseTraceparentForTest(tc.h); got != tc.trace {
			t.Errorf("%q: trace %q, want %q", tc.h, got, tc.trace)
		}
	}
}

func TestValidToken(t *testing.T) {
	for tok, ok := range map[string]bool{"abc": true, "a-b_c.9~": true, "": false, "a b": false, "é": false, "a\x00": false, "\t": false} {
		if server.ValidToken(tok) != ok {
			t.Errorf("ValidToken(%q) != %v", tok, ok)
		}
	}
	_, err := server.New(context.Background(), nil, server.StaticSource{}, server.Options{Token: ""})
	if err == nil {
		t.Error("New accepted an empty token")
	}
}

// A client that trickles its body is answered at its deadline.
func TestSlowBodyAnsweredAtDeadline(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nkindgi-pack-token: %s\r\nkindgi-timeout-ms: 300\r\nContent-Length: 100\r\n\r\n{\"v\":2,", token)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := &response{res.StatusCode, res.Header, b}
	checkAnswer(t, r)
	wantError(t, r, "deadline-exceeded")
}

// internal-error is an HTTP 500 (the service failed), never a protocol
// message: here the tools were closed under a running listener.
func TestInternalErrorIs500(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	if err := ts.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`))
	if r.status != http.StatusInternalServerError {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if calls := ts.logs.records(t, "call"); len(calls) != 1 || calls[0]["outcome"] != "internal-error" {
		t.Errorf("call records %v", calls)
	}
}
