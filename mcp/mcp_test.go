package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

const token = "test-token-1"

// syncBuffer is the server's event log (sandboxtest.Buffer).
type syncBuffer struct{ sandboxtest.Buffer }

// records decodes the process events of a kind.
func (s *syncBuffer) records(kind string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

func manifestWith(t testing.TB, base []byte, set map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loopTool(t testing.TB) server.StaticTool {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", "loop.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m := manifestWith(t, examples.EchoManifest, map[string]any{
		"id": "t.spin", "input": map[string]any{"type": "object"}, "output": map[string]any{"type": "object"},
		"sandbox": "none", "limits": map[string]any{"memMB": 16, "cpuMs": 600000}, "mutating": true,
		"effects": []any{map[string]any{"kind": "writes"}},
	})
	return server.StaticTool{Manifest: m, Module: wasm}
}

// readTool is echo with an x.ai/tool input projection (path ← /message,
// limit ← /repeat, whose default is 1).
func readTool(t testing.TB) server.StaticTool {
	m := manifestWith(t, examples.EchoManifest, map[string]any{
		"id":       "t.read",
		"metadata": map[string]any{"x.ai/tool": map[string]any{"kind": "read", "input": map[string]any{"path": "/message", "limit": "/repeat"}}},
	})
	return server.StaticTool{Manifest: m, Module: examples.EchoWasm}
}

func tools(t testing.TB) []server.StaticTool {
	return []server.StaticTool{{Manifest: examples.EchoManifest, Module: examples.EchoWasm}, loopTool(t), readTool(t)}
}

type fixture struct {
	core *server.Server
	mcp  *mcp.Server
	logs *syncBuffer
}

func newFixture(t testing.TB, st []server.StaticTool, opts server.Options) *fixture {
	t.Helper()
	exec := exectest.Executor(t)
	logs := &syncBuffer{}
	opts.Token, opts.Log = token, server.NewLogger(logs)
	core, err := server.New(context.Background(), exec, server.StaticSource{Tools: st}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close(context.Background()) })
	ms, err := mcp.New(core, mcp.Options{Log: opts.Log})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{core: core, mcp: ms, logs: logs}
}

// connect opens a go-sdk client session over the in-memory transport.
func (f *fixture) connect(t testing.TB, version string, copts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := f.mcp.SDK().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, copts).Connect(context.Background(), ct, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func metaOf(t testing.TB, m sdk.Meta, key string) map[string]any {
	t.Helper()
	b, _ := json.Marshal(m[key])
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil || out == nil {
		t.Fatalf("_meta[%q] = %s", key, b)
	}
	return out
}

func rpcCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// Both protocol revisions the SDK serves: the 2026-07-28 stateless model
// (server/discover, per-request _meta) and the 2025-11-25 handshake.
func TestInMemoryListAndCall(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			cs := f.connect(t, version, nil)
			ctx := context.Background()
			lt, err := cs.ListTools(ctx, &sdk.ListToolsParams{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range lt.Tools {
				names = append(names, tl.Name)
				env := metaOf(t, tl.Meta, "x.ai/tool")
				if env["name"] != tl.Name || env["namespace"] != "mcp" || env["input"] != nil {
					t.Errorf("%s: tools/list envelope %v", tl.Name, env)
				}
			}
			if strings.Join(names, ",") != "acme.echo,t.read,t.spin" {
				t.Fatalf("tools %v", names)
			}
			spin := lt.Tools[2]
			if spin.Annotations.ReadOnlyHint || !*spin.Annotations.DestructiveHint || *spin.Annotations.OpenWorldHint {
				t.Errorf("t.spin annotations %+v", spin.Annotations)
			}
			if echo := lt.Tools[0]; !echo.Annotations.ReadOnlyHint || echo.OutputSchema == nil {
				t.Errorf("acme.echo %+v", echo)
			}

			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "ab", "repeat": 2}})
			if err != nil || res.IsError {
				t.Fatalf("echo: %v %+v", err, res)
			}
			if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"echo":"abab","length":4}` {
				t.Errorf("structuredContent %s", b)
			}
			if len(res.Content) != 1 || res.Content[0].(*sdk.TextContent).Text != `{"echo":"abab","length":4}` {
				t.Errorf("content %+v", res.Content)
			}
			if env := metaOf(t, res.Meta, "x.ai/tool"); env["name"] != "acme.echo" || env["read_only"] != true {
				t.Errorf("result envelope %v", env)
			}
			if call := metaOf(t, res.Meta, mcp.MetaCall); call["callId"] == "" || call["usage"] == nil {
				t.Errorf("call meta %v", call)
			}

			// The projection is of the validated input: repeat's default (1)
			// is in it.
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "t.read", Arguments: map[string]any{"message": "notes.txt"}})
			if err != nil || res.IsError {
				t.Fatalf("t.read: %v %+v", err, res)
			}
			// (Field order is checked on the wire by the binary's tests: the
			// client decodes _meta into a map.)
			want := map[string]any{"version": 1.0, "name": "t.read", "kind": "read", "namespace": "mcp", "label": "Read", "read_only": true,
				"input": map[string]any{"path": "notes.txt", "limit": 1.0}}
			if got := metaOf(t, res.Meta, "x.ai/tool"); !reflect.DeepEqual(got, want) {
				t.Errorf("projected envelope %v, want %v", got, want)
			}

			// Schema-invalid input is a tool execution error.
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"repeat": 0}})
			if err != nil || !res.IsError {
				t.Fatalf("invalid input: %v %+v", err, res)
			}
			text := res.Content[0].(*sdk.TextContent).Text
			if !strings.HasPrefix(text, "input-validation-failed: ") || !strings.Contains(text, "- at /repeat: must be >= 1") {
				t.Errorf("text %q", text)
			}
			if e := metaOf(t, res.Meta, mcp.MetaError); e["code"] != "input-validation-failed" || e["issues"] == nil {
				t.Errorf("error meta %v", e)
			}
			if env := metaOf(t, res.Meta, "x.ai/tool"); env["input"] != nil {
				t.Errorf("an invalid input was projected: %v", env)
			}

			// Protocol errors have real codes.
			_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "no.such"})
			if rpcCode(err) != jsonrpc.CodeInvalidParams {
				t.Errorf("unknown tool: %v (code %d)", err, rpcCode(err))
			}
			_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.echo", Arguments: []int{1}})
			if rpcCode(err) != jsonrpc.CodeInvalidParams {
				t.Errorf("array arguments: %v (code %d)", err, rpcCode(err))
			}
		})
	}
}

// Cancelling the client's request (notifications/cancelled) cancels the
// guest: the core records the call cancelled and frees its slots.
func TestCancellationStopsGuest(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	cs := f.connect(t, "2025-11-25", nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "t.spin", Arguments: map[string]any{}})
		errc <- err
	}()
	waitFor(t, "the spinning call to run", func() bool { return inflight(f.core) == 1 })
	begun := time.Now()
	cancel()
	<-errc
	waitFor(t, "the cancelled call's record", func() bool {
		for _, r := range f.logs.records("call") {
			if r["id"] == "t.spin" && r["outcome"] == "cancelled" {
				return true
			}
		}
		return false
	})
	waitFor(t, "its slot back", func() bool { return inflight(f.core) == 0 })
	t.Logf("cancel → guest stopped and recorded in %v", time.Since(begun))
}

// inflight reads sandboxd_inflight_calls from the core's /metrics.
func inflight(core *server.Server) int {
	rr := httptest.NewRecorder()
	core.ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(rr.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "sandboxd_inflight_calls "); ok {
			n := 0
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return -1
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A spinning tool beside echo over MCP: echo keeps answering; the spinning
// calls are answered deadline-exceeded at their _meta timeout.
func TestSpinBesideEcho(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{MaxConcurrency: 4, PerToolConcurrency: 2, PerTenantConcurrency: 4}) // one tenant (stdio): the tool cap alone leaves echo room
	cs := f.connect(t, "2026-07-28", nil)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var spinMu sync.Mutex
	var spinCodes []string
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "t.spin", Arguments: map[string]any{},
					Meta: sdk.Meta{mcp.MetaTimeoutMs: 300}})
				code := "?"
				switch {
				case err != nil:
					code = err.Error()
				case res.IsError:
					code, _ = metaOf(t, res.Meta, mcp.MetaError)["code"].(string)
				}
				spinMu.Lock()
				spinCodes = append(spinCodes, code)
				spinMu.Unlock()
			}
		}()
	}
	waitFor(t, "the spinning calls", func() bool { return inflight(f.core) >= 2 })
	var worst time.Duration
	n := 0
	window := 2 * time.Second
	if testing.Short() {
		window = 700 * time.Millisecond // the two spinners burn both cores meanwhile
	}
	for end := time.Now().Add(window); time.Now().Before(end); n++ {
		begun := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "x"}})
		if err != nil || res.IsError {
			t.Fatalf("echo beside the spinners: %v %+v", err, res)
		}
		worst = max(worst, time.Since(begun))
	}
	close(stop)
	wg.Wait()
	spinMu.Lock()
	defer spinMu.Unlock()
	t.Logf("%d echo calls beside 2 spinning ones, slowest %v; spinning outcomes %v", n, worst, spinCodes)
	if worst > time.Second {
		t.Errorf("an echo call took %v beside the spinners", worst)
	}
	// A spinning call is answered at its deadline, or refused while the
	// guests answered before it still hold the tool's slots as they stop.
	deadlines := 0
	for _, c := range spinCodes {
		switch {
		case c == "deadline-exceeded":
			deadlines++
		case strings.Contains(c, "t.spin is at its concurrency cap"):
		default:
			t.Errorf("a spinning call answered %q", c)
		}
	}
	if deadlines == 0 {
		t.Error("no spinning call was answered deadline-exceeded")
	}
}

// Progress notifications (start and end) when the request has a
// progressToken; a traceparent in _meta joins the call record.
func TestProgressAndTraceparent(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	cs := f.connect(t, "2025-11-25", &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, r.Params)
		mu.Unlock()
	}})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "p"},
		Meta: sdk.Meta{"progressToken": "tok-1", "traceparent": tp}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	waitFor(t, "two progress notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	if got[0].ProgressToken != "tok-1" || got[0].Progress >= got[1].Progress || got[1].Message != "completed" {
		t.Errorf("progress %+v %+v", got[0], got[1])
	}
	recs := f.logs.records("call")
	if len(recs) != 1 || recs[0]["traceId"] != "4bf92f3577b34da6a3ce929d0e0e4736" || recs[0]["spanId"] != "00f067aa0ba902b7" {
		t.Errorf("call record %v", recs)
	}
}

// A tool MCP cannot take fails New with a problem naming it, never a panic.
func TestRefusedTools(t *testing.T) {
	exec, err := executor.New(context.Background(), executor.NewConfig().WithCacheDir(sandboxtest.CacheDir(t)).WithGuestOutput(io.Discard, io.Discard).WithGCHeadroom(0)) // TestG02MCPBodyCharge keeps the collector close behind: no GC tuner in this process
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close(context.Background())
	for _, tc := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"array input", map[string]any{"input": map[string]any{"type": "array"}}, "input schema's root"},
		{"untyped input", map[string]any{"input": map[string]any{}}, "input schema's root"},
		{"name with a space", map[string]any{"id": "acme echo"}, "not an MCP tool name"},
		{"name too long", map[string]any{"id": strings.Repeat("a", 129)}, "not an MCP tool name"},
		{"bad x-mcp-header", map[string]any{"input": map[string]any{"type": "object", "properties": map[string]any{
			"message": map[string]any{"type": "object", "x-mcp-header": "X"}}}}, "not servable over MCP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := server.StaticTool{Manifest: manifestWith(t, examples.EchoManifest, tc.set), Module: examples.EchoWasm}
			core, err := server.New(context.Background(), exec, server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{Token: token})
			if err != nil {
				t.Skipf("the core refuses it already: %v", err)
			}
			defer core.Close(context.Background())
			_, err = mcp.New(core, mcp.Options{})
			var be *server.BootError
			if !errors.As(err, &be) || len(be.Problems) != 1 || !strings.Contains(be.Problems[0].Message, tc.want) {
				t.Fatalf("New: %v", err)
			}
			t.Logf("%s: %s", tc.name, be.Problems[0].Message)
		})
	}
	// A non-object output schema is served without outputSchema.
	core, err := server.New(context.Background(), exec, server.StaticSource{Tools: []server.StaticTool{{
		Manifest: manifestWith(t, examples.EchoManifest, map[string]any{"output": map[string]any{"type": "array"}}), Module: examples.EchoWasm}}},
		server.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close(context.Background())
	tl, err := mcp.ToolFor(core.Tools()[0])
	if err != nil || tl.OutputSchema != nil {
		t.Fatalf("array output: %v %v", err, tl.OutputSchema)
	}
}

// Streamable HTTP beside the pack routes: auth, Origin, body cap, bad
// JSON-RPC, drain; and one metrics registry for both protocols.
func TestHTTPHostile(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{AllowedOrigins: []string{"https://app.example"}, MaxBodyBytes: 1 << 20}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"h"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	post := func(body string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "acme.echo")
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
				continue
			}
			if hdr[i+1] == "" {
				req.Header.Del(hdr[i])
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, body string
		hdr        []string
		status     int
		has        string
	}{
		{"ok", call, nil, 200, `"structuredContent":{"echo":"h","length":1}`},
		{"no token", call, []string{"Authorization", ""}, 401, "Bearer"},
		{"wrong token", call, []string{"Authorization", "Bearer " + token + "x"}, 401, ""},
		{"the pack header is not the bearer", call, []string{"Authorization", "", "kindgi-pack-token", token}, 401, ""},
		{"basic scheme", call, []string{"Authorization", "Basic " + token}, 401, ""},
		{"wrong origin", call, []string{"Origin", "https://evil.example"}, 403, "Origin"},
		{"null origin", call, []string{"Origin", "null"}, 403, ""},
		{"allowed origin", call, []string{"Origin", "https://app.example"}, 200, `"echo":"h"`},
		{"loopback origin", call, []string{"Origin", "http://localhost:6274"}, 200, `"echo":"h"`},
		{"rebinding Host", call, []string{"Host", "evil.example:80"}, 403, ""},
		{"oversize body", call + strings.Repeat(" ", 1<<20), nil, 413, ""},
		{"not JSON", `{"jsonrpc":`, nil, 400, ""},
		{"not JSON-RPC", `{"hello":1}`, nil, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := post(tc.body, tc.hdr...)
			if st != tc.status || !strings.Contains(body, tc.has) {
				t.Fatalf("status %d, want %d (%q): %.300s", st, tc.status, tc.has, body)
			}
		})
	}
	// Chunked oversize body: refused while reading.
	req, _ := http.NewRequest("POST", ts.URL+"/mcp", io.MultiReader(strings.NewReader(call+strings.Repeat(" ", 2<<20))))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 413 {
		t.Errorf("chunked oversize: %v %v", res, err)
	} else {
		res.Body.Close()
	}

	// One registry: the MCP calls above are counted with the pack's.
	rr := httptest.NewRecorder()
	f.core.ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rr.Body.String(), `sandboxd_invocations_total{tool="acme.echo",outcome="ok"} 3`) {
		t.Errorf("metrics: %s", grep(rr.Body.String(), "sandboxd_invocations_total"))
	}

	// Draining: 503 before the SDK sees the request.
	go f.core.Drain()
	waitFor(t, "draining", f.core.Draining)
	if st, _ := post(call); st != 503 {
		t.Errorf("while draining: %d", st)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// stdio: malformed lines are answered and skipped; the session goes on;
// it ends when stdin closes.
func TestStdioMalformedLines(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`garbage`,
		`{}`,
		`[]`,
		`{"jsonrpc":"1.0","id":7,"method":"ping"}`,
		`5`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"still here"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`,
	}, "\n") + "\n"
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- f.mcp.ServeStdio(context.Background(), pr, &out) }()
	_, _ = io.WriteString(pw, in)
	waitFor(t, "the answers", func() bool {
		return strings.Count(out.String(), "\n") >= 8
	})
	pw.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return when stdin closed")
	}
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			ID    any `json:"id"`
			Error *struct {
				Code int64 `json:"code"`
			} `json:"error"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("stdout line is not JSON: %q", l)
			continue
		}
		key := "result"
		if m.Error != nil {
			key = fmt.Sprintf("error %d", m.Error.Code)
		}
		got[string(mustJSON(m.ID))+" "+key] = true
	}
	for _, want := range []string{"1 result", "null error -32700", "null error -32600", "7 error -32600", "2 result", "3 error -32601"} {
		if !got[want] {
			t.Errorf("no %q in %v", want, got)
		}
	}
	if !strings.Contains(out.String(), `"still here"`) {
		t.Errorf("the call after the malformed lines was not answered: %s", out.String())
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// On Streamable HTTP a 2026-07-28 call is cancelled by closing its
// response stream: the guest stops and the call is recorded cancelled.
func TestHTTPClosedStreamCancels(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t.spin","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/mcp", strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "t.spin", "Authorization": "Bearer " + token} {
		req.Header.Set(k, v)
	}
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the spinning call to run", func() bool { return inflight(f.core) == 1 })
	begun := time.Now()
	cancel()
	<-errc
	waitFor(t, "the cancelled record", func() bool {
		for _, r := range f.logs.records("call") {
			if r["id"] == "t.spin" && r["outcome"] == "cancelled" {
				return true
			}
		}
		return false
	})
	waitFor(t, "its slot back", func() bool { return inflight(f.core) == 0 })
	t.Logf("stream closed → guest stopped and recorded in %v", time.Since(begun))
}

// After a reload the MCP tool list follows the catalog: a new tool is
// listed (clients get notifications/tools/list_changed), a tool MCP cannot
// take is left out and logged as mcp-tools-refused.
func TestReloadFollowsCatalog(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.wasm"), examples.EchoWasm, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name string, set map[string]any) {
		set["codeArtifactRef"] = map[string]any{"kind": "filesystem", "modulePath": "handler.wasm"}
		if err := os.WriteFile(filepath.Join(dir, name), manifestWith(t, examples.EchoManifest, set), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("echo.tool.json", map[string]any{})
	exec, err := executor.New(context.Background(), executor.NewConfig().WithCacheDir(sandboxtest.CacheDir(t)).WithDevMode(true).WithGuestOutput(io.Discard, io.Discard).WithGCHeadroom(0))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close(context.Background())
	logs := &syncBuffer{}
	core, err := server.New(context.Background(), exec, server.DirSource{Dir: dir}, server.Options{Token: token, Log: server.NewLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close(context.Background())
	ms, err := mcp.New(core, mcp.Options{Log: server.NewLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{core: core, mcp: ms, logs: logs}
	changed := make(chan struct{}, 8)
	cs := f.connect(t, "2025-11-25", &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	write("second.tool.json", map[string]any{"id": "acme.second"})
	write("bad.tool.json", map[string]any{"id": "acme.bad", "input": map[string]any{"type": "array"}})
	if err := core.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed")
	}
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "acme.echo,acme.second" {
		t.Errorf("tools after the reload %v", names)
	}
	if r := logs.records("mcp-tools-refused"); len(r) != 1 || !strings.Contains(fmt.Sprint(r[0]["problems"]), "acme.bad") {
		t.Errorf("mcp-tools-refused %v", r)
	}
	if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "acme.second", Arguments: map[string]any{"message": "r"}}); err != nil || res.IsError {
		t.Errorf("the reloaded tool: %v %+v", err, res)
	}
}
