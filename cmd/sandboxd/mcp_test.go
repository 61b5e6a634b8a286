package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

var examplePack = filepath.Join("..", "..", "examples", "pack")

// The real binary over stdio with the go-sdk client: stdout carries only
// protocol (the session would break otherwise), the envelope's fields are
// in canonical order on the wire, and the process exits 0 when stdin
// closes.
func TestMCPStdioBinary(t *testing.T) {
	bin := sandboxdBinary(t)
	cmd := exec.Command(bin, "mcp", "--tools", examplePack, "--dev", "--cache-dir", sandboxtest.CacheDir(t))
	var stderr sandboxtest.Buffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// A raw session first: the wire bytes.
	w := func(s string) { _, _ = io.WriteString(stdin, s+"\n") }
	w(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	w(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"wire"}}}`)
	sc := bufio.NewScanner(stdoutPipe)
	sc.Buffer(nil, 1<<20)
	var lines []string
	for len(lines) < 2 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 2 {
		t.Fatalf("stdout %q; stderr %s", lines, stderr.String())
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("a stdout line is not JSON-RPC: %q", l)
		}
	}
	if !strings.Contains(lines[1], `"x.ai/tool":{"version":1,"name":"acme.echo","kind":"other","namespace":"mcp","label":"Tool","read_only":true}`) ||
		!strings.Contains(lines[1], `"structuredContent":{"echo":"wire","length":4}`) {
		t.Errorf("tools/call answer %s", lines[1])
	}
	begun := time.Now()
	stdin.Close()
	err := cmd.Wait()
	t.Logf("exit %v %v after stdin closed", err, time.Since(begun))
	if err != nil {
		t.Errorf("exit: %v; stderr %s", err, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("a stderr line is not a JSON process event: %q", l)
		}
	}

	// The go-sdk client (2026-07-28, then the handshake), spawning it.
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		cmd := exec.Command(bin, "mcp", "--tools", examplePack, "--dev", "--cache-dir", sandboxtest.CacheDir(t))
		cmd.Stderr = io.Discard
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil).Connect(context.Background(),
			&sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		goClientChecks(t, cs)
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
			t.Errorf("%s: process state after close: %v", version, cmd.ProcessState)
		}
	}
}

func goClientChecks(t *testing.T, cs *sdk.ClientSession) {
	t.Helper()
	ctx := context.Background()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) != 3 {
		t.Fatalf("tools/list: %v %+v", err, lt)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "go"}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"echo":"go","length":2}` {
		t.Errorf("structuredContent %s", b)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.lookup", Arguments: map[string]any{"id": 4}})
	if err != nil || !res.IsError || !strings.HasPrefix(res.Content[0].(*sdk.TextContent).Text, "handler-error: ") {
		t.Fatalf("lookup: %v %+v", err, res)
	}
	// An unknown tool: -32602 with the nearest name and where the names are.
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "acme.lokup", Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if want := `unknown tool "acme.lokup" (did you mean "acme.lookup"?); tools/list lists the tools`; !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || we.Message != want {
		t.Errorf("unknown tool: %v, want -32602 %s", err, want)
	}
}

// serve --mcp: one process answers the pack protocol and MCP over
// Streamable HTTP with the bearer token, counted in one metrics registry;
// SIGTERM drains both.
func TestServeMCPBinary(t *testing.T) {
	bin := sandboxdBinary(t)
	eventsFile := filepath.Join(t.TempDir(), "events.jsonl")
	base, stop := startServeMCP(t, bin, "--events", eventsFile)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	// The pack protocol.
	req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(`{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{"message":"pack"},"ctx":{"tenantId":"t","runId":"r"}}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("kindgi-pack-token", "tok-mcp")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("pack invoke: %v %v", res, err)
	}
	res.Body.Close()
	// MCP with the go-sdk client, both revisions.
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil).Connect(context.Background(),
			&sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: bearerClient("tok-mcp")},
			&sdk.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("%s: %v", version, err)
		}
		goClientChecks(t, cs)
		cs.Close()
	}
	// A wrong token never reaches MCP.
	if _, err := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: bearerClient("wrong")}, nil); err == nil {
		t.Error("connected with a wrong token")
	}
	m := metrics(base)
	for _, want := range []string{`sandboxd_invocations_total{tool="acme.echo",outcome="ok"} 3`, `sandboxd_invocations_total{tool="acme.lookup",outcome="handler-throw"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
	// One lifecycle event stream: the MCP calls' events are in --events.
	stop()
	stopped = true
	evb, _ := os.ReadFile(eventsFile)
	if n := strings.Count(string(evb), `"status":"failed","tool":"acme.lookup"`); n != 2 {
		t.Errorf("%d failed acme.lookup events (the two MCP calls), want 2: %s", n, evb)
	}
}

// startServeMCP runs serve --mcp on examples/pack with token tok-mcp.
func startServeMCP(t *testing.T, bin string, extra ...string) (base string, stop func() string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--mcp", "--tools", examplePack, "--dev", "--cache-dir", sandboxtest.CacheDir(t)}, extra...)...)
	cmd.Env = append(os.Environ(), tokenEnv+"=tok-mcp", "PORT=0")
	var stderr sandboxtest.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ev := processEvents(t, stderr.String(), "listening"); len(ev) == 1 {
			base = fmt.Sprintf("http://127.0.0.1:%d", int(ev[0]["port"].(float64)))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if base == "" {
		cmd.Process.Kill()
		t.Fatalf("no listening event: %s", stderr.String())
	}
	return base, func() string {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve exit: %v", err)
		}
		return stderr.String()
	}
}

type bearer struct{ tok string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

func bearerClient(tok string) *http.Client { return &http.Client{Transport: bearer{tok}} }

// SIGTERM on sandboxd mcp drains like the pack routes: a new call is
// refused (-32000, draining) while the call in flight is answered; then
// the process exits 0.
func TestMCPStdioDrain(t *testing.T) {
	bin := sandboxdBinary(t)
	tools := t.TempDir()
	loop := writeManifest(t, "loop", map[string]any{"id": "t.loop", "limits": map[string]any{"memMB": 16, "cpuMs": 300000}})
	b, err := os.ReadFile(loop)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tools, "loop.tool.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mcp", "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--drain-timeout", "5s")
	var stderr sandboxtest.Buffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdoutPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stdout closed before %s; stderr %s", what, stderr.String())
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s", what)
		}
		return ""
	}
	w := func(s string) { _, _ = io.WriteString(stdin, s+"\n") }
	w(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next("initialize")
	w(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t.loop","arguments":{},"_meta":{"progressToken":"p","io.github.sandboxd/timeoutMs":1500}}}`)
	if l := next("running progress"); !strings.Contains(l, `"notifications/progress"`) {
		t.Fatalf("want the running progress, got %s", l)
	}
	begun := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for len(processEvents(t, stderr.String(), "draining")) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	w(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t.loop","arguments":{}}}`)
	var refused, held string
	for refused == "" || held == "" {
		l := next("the answers")
		switch {
		case strings.Contains(l, `"id":3`):
			refused = l
		case strings.Contains(l, `"id":2`):
			held = l
		}
	}
	if !strings.Contains(refused, `"code":-32000`) || !strings.Contains(refused, "draining") {
		t.Errorf("the call sent while draining: %s", refused)
	}
	if !strings.Contains(held, `"isError":true`) || !strings.Contains(held, `"code":"deadline-exceeded"`) {
		t.Errorf("the held call: %.400s", held)
	}
	err = cmd.Wait()
	st := processEvents(t, stderr.String(), "stopped")
	t.Logf("exit %v %v after SIGTERM; stopped %v", err, time.Since(begun), st)
	if err != nil || len(st) != 1 || st[0]["abandoned"] != 0.0 {
		t.Errorf("exit %v, stopped %v", err, st)
	}
}
