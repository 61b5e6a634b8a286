package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/toolerr"
)

const token = "s3cret-token"

var (
	schemaOnce sync.Once
	schemas    map[string]*jsonschema.Schema
	schemaErr  error
)

// protocolSchema returns the pack-protocol schema's response and info
// definitions (the vendored spec/kindgi-pack-protocol.schema.json).
func protocolSchema(t testing.TB, def string) *jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		f, err := os.Open("../spec/kindgi-pack-protocol.schema.json")
		if err != nil {
			schemaErr = err
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		const url = "https://kindgi.com/schemas/v1/pack-protocol.schema.json"
		if schemaErr = c.AddResource(url, doc); schemaErr != nil {
			return
		}
		schemas = map[string]*jsonschema.Schema{}
		for _, d := range []string{"response", "info", "request"} {
			s, err := c.Compile(url + "#/$defs/" + d)
			if err != nil {
				schemaErr = err
				return
			}
			schemas[d] = s
		}
	})
	if schemaErr != nil {
		t.Fatal(schemaErr)
	}
	return schemas[def]
}

// validate checks body against a protocol definition.
func validate(t testing.TB, def string, body []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("not JSON: %v: %q", err, body)
	}
	if err := protocolSchema(t, def).Validate(inst); err != nil {
		t.Fatalf("%s does not validate against the pack-protocol %s shape: %v", body, def, err)
	}
}

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// fixture returns the bytes of a built test module (skipped under -short
// when over 1 MiB: sandboxtest.Fixture).
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	_, b := sandboxtest.Fixture(t, name)
	return b
}

// tool builds a manifest for a fixture.
func tool(t testing.TB, id, fx string, memMB, cpuMs int, extra map[string]any) server.StaticTool {
	t.Helper()
	m := map[string]any{
		"id": id, "version": "1.0.0", "description": "fixture " + fx,
		"input": map[string]any{}, "output": map[string]any{},
		"limits":          map[string]any{"memMB": memMB, "cpuMs": cpuMs},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": fx + ".wasm"},
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return server.StaticTool{Manifest: b, Module: fixture(t, fx)}
}

func echoTool() server.StaticTool {
	return server.StaticTool{Manifest: examples.EchoManifest, Module: examples.EchoWasm}
}

// standardTools is the pack most tests serve.
func standardTools(t testing.TB) []server.StaticTool {
	return []server.StaticTool{
		echoTool(),
		tool(t, "t.counter", "counter", 16, 1000, nil),
		tool(t, "t.loop", "loop", 16, 600_000, nil),
		tool(t, "t.spin", "loop", 16, 50, nil),
		tool(t, "t.membomb", "membomb", 16, 5000, nil),
		tool(t, "t.trap", "trap", 16, 1000, nil),
		tool(t, "t.declared", "declared_error", 16, 1000, nil),
		tool(t, "t.echo", "echo_reactor", 16, 1000, map[string]any{
			"input": map[string]any{"type": "object", "properties": map[string]any{
				"opts": map[string]any{"type": "object", "default": map[string]any{}, "properties": map[string]any{
					"depth": map[string]any{"type": "integer", "default": 3}}},
				"name": map[string]any{"type": "string"}},
				"required": []string{"name"}, "additionalProperties": false}}),
		tool(t, "t.badout", "bad_output", 16, 1000, map[string]any{"output": echoOutputSchema(t)}),
	}
}

// testServer is a Server serving on a real loopback listener.
type testServer struct {
	*server.Server
	url    string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// syncBuffer is the server's event log (sandboxtest.Buffer).
type syncBuffer struct{ sandboxtest.Buffer }

// records returns the process events of a kind.
func (s *syncBuffer) records(t testing.TB, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(s.String(), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("process event is not JSON: %q", l)
		}
		if m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// newExecutor returns an executor of cfg sharing the test binary's
// compilation cache and discarding guest output.
func newExecutor(t testing.TB, cfg executor.Config) *executor.Executor {
	t.Helper()
	return exectest.Executor(t, func(executor.Config) executor.Config {
		return cfg.WithCacheDir(sandboxtest.CacheDir(t)).WithGuestOutput(io.Discard, io.Discard)
	})
}

func start(t testing.TB, src server.Source, opts server.Options) *testServer {
	t.Helper()
	return startWith(t, newExecutor(t, executor.NewConfig()), src, opts)
}

func startWith(t testing.TB, exec *executor.Executor, src server.Source, opts server.Options) *testServer {
	t.Helper()
	logs := &syncBuffer{}
	opts.Token = token
	opts.Log = server.NewLogger(logs)
	srv, err := server.New(context.Background(), exec, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: srv, url: "http://" + ln.Addr().String(), logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
		srv.Close(context.Background())
	})
	return ts
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) msg(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("status %d, body not JSON: %q", r.status, r.body)
	}
	return m
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func do(t testing.TB, ctx context.Context, method, url string, body io.Reader, hdr map[string]string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return &response{res.StatusCode, res.Header, b}, nil
}

func authJSON(extra ...string) map[string]string {
	h := map[string]string{"content-type": "application/json", "kindgi-pack-token": token}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// invokeBody is a toolInvoke frame.
func invokeBody(toolID, input string) string {
	return fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":%q},"input":%s,"ctx":{"tenantId":"t1","runId":"r1"}}`, toolID, input)
}

// invoke posts a frame and checks the transport contract of the answer:
// a 200 carries a schema-valid response and the two headers; a non-2xx
// carries text, never a protocol message.
func (ts *testServer) invoke(t testing.TB, body string, extra ...string) *response {
	t.Helper()
	r, err := do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke", strings.NewReader(body), authJSON(extra...))
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer(t, r)
	return r
}

func checkAnswer(t testing.TB, r *response) {
	t.Helper()
	if r.status == http.StatusOK {
		validate(t, "response", r.body)
		if r.header.Get("kindgi-duration-ms") == "" || r.header.Get("kindgi-artifact-version") == "" {
			t.Fatalf("200 without kindgi-duration-ms / kindgi-artifact-version: %v", r.header)
		}
		return
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("status %d with content type %q: %s", r.status, ct, r.body)
	}
	if r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After")
	}
}

func wantResult(t testing.TB, r *response, output string) {
	t.Helper()
	m := r.msg(t)
	if r.status != 200 || m["kind"] != "result" {
		t.Fatalf("want result %s, got %d %s", output, r.status, r.body)
	}
	if output != "" {
		got, _ := json.Marshal(m["output"])
		var w any
		_ = json.Unmarshal([]byte(output), &w)
		want, _ := json.Marshal(w)
		if string(got) != string(want) {
			t.Fatalf("output %s, want %s", got, want)
		}
	}
}

func wantError(t testing.TB, r *response, code string) map[string]any {
	t.Helper()
	m := r.msg(t)
	if r.status != 200 || m["kind"] != "error" || m["code"] != code {
		t.Fatalf("want error %s, got %d %s", code, r.status, r.body)
	}
	return m
}

// eventually polls cond for up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric reads one sample from /metrics.
func (ts *testServer) metric(t testing.TB, sample string) string {
	t.Helper()
	r, err := do(t, context.Background(), http.MethodGet, ts.url+"/metrics", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			return v
		}
	}
	return ""
}

func echoOutputSchema(t testing.TB) json.RawMessage {
	var m struct{ Output json.RawMessage }
	if err := json.Unmarshal(examples.EchoManifest, &m); err != nil {
		t.Fatal(err)
	}
	return m.Output
}

func toolerrCode(s string) toolerr.Code { return toolerr.Code(s) }
