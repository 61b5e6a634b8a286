package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// processEvents decodes the JSON-line process events of a kind.
func processEvents(t *testing.T, stderr, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

func TestServeConfigInvalid(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, token string
		args        []string
	}{
		{"no token", "", []string{"--tools", dir}},
		{"blank token", "  \t ", []string{"--tools", dir}},
		{"token with a space", "a b", []string{"--tools", dir}},
		{"token with a control character", "ab\x01", []string{"--tools", dir}},
		{"no source", "tok", nil},
		{"two sources", "tok", []string{"--tools", dir, "--index", "x.json"}},
		{"bad env check", "tok", []string{"--tools", dir, "--env-check", "maybe"}},
		{"bad posture", "tok", []string{"--tools", dir, "--refuse-posture", "loose"}},
		{"record sample without a directory", "tok", []string{"--tools", dir, "--record-sample", "10"}},
		{"record cap not positive", "tok", []string{"--tools", dir, "--record-failures", dir, "--record-max-files", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tokenEnv, tc.token)
			code, stdout, stderr := runCLI(t, "", append([]string{"serve"}, tc.args...)...)
			if code != exitError || stdout != "" {
				t.Fatalf("exit %d, stdout %q", code, stdout)
			}
			ev := processEvents(t, stderr, "config-invalid")
			if len(ev) != 1 || ev[0]["problems"] == nil {
				t.Fatalf("stderr %q", stderr)
			}
			if tc.token != "" && strings.TrimSpace(tc.token) != "" && strings.Contains(stderr, tc.token) {
				t.Error("the token reached stderr")
			}
		})
	}
}

// The token leaves the environment before any pack code is loaded.
func TestServeRemovesToken(t *testing.T) {
	t.Setenv(tokenEnv, "tok")
	runCLI(t, "", "serve") // config-invalid (no source), after the token was taken
	if v, ok := os.LookupEnv(tokenEnv); ok {
		t.Fatalf("%s still set: %q", tokenEnv, v)
	}
}

// boot-failed lists one problem per missing or unloadable module.
func TestServeBootFailed(t *testing.T) {
	sandboxtest.SkipShort(t, "examples/echo/handler.wasm", int64(len(examples.EchoWasm)))
	dir := t.TempDir()
	var m map[string]json.RawMessage
	_ = json.Unmarshal(examples.EchoManifest, &m)
	tool := func(id, mp string) map[string]any {
		return map[string]any{"id": id, "input": m["input"], "output": m["output"], "modulePath": mp}
	}
	idx, _ := json.Marshal(map[string]any{"v": 1, "packId": "p", "packVersion": "1", "artifactVersion": "1", "publishedAt": "2026-01-01T00:00:00.000Z",
		"tools":      []any{tool("a.one", "one.ts"), tool("a.two", "two.wasm"), tool("a.ok", "ok.wasm")},
		"guardrails": []any{}, "agents": []any{}, "flows": []any{}})
	_ = os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "ok.wasm"), examples.EchoWasm, 0o644)
	t.Setenv(tokenEnv, "tok")
	code, _, stderr := runCLI(t, "", "serve", "--index", filepath.Join(dir, "index.json"), "--cache-dir", sandboxtest.CacheDir(t))
	if code != exitError {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ev := processEvents(t, stderr, "boot-failed")
	if len(ev) != 1 {
		t.Fatalf("stderr %s", stderr)
	}
	if ps, _ := ev[0]["problems"].([]any); len(ps) != 2 {
		t.Fatalf("problems %v", ev[0]["problems"])
	}
}

// run --events - writes the lifecycle to stderr; stdout stays exactly one
// JSON document.
func TestRunEvents(t *testing.T) {
	sandboxtest.SkipShort(t, "examples/echo/handler.wasm", int64(len(examples.EchoWasm)))
	code, stdout, stderr := runCLI(t, "", "run", "--events", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	envelope(t, stdout)
	var phases []string
	for _, l := range strings.Split(stderr, "\n") {
		var ev struct {
			ToolCallID, Status string
			Meta               map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal([]byte(l), &ev) == nil && ev.ToolCallID != "" {
			phases = append(phases, ev.Status)
			if string(ev.Meta["x.ai/tool"]) == "" {
				t.Errorf("no envelope: %s", l)
			}
		}
	}
	if strings.Join(phases, ",") != "pending,in_progress,completed" {
		t.Fatalf("phases %v in %s", phases, stderr)
	}
	p := filepath.Join(t.TempDir(), "ev.jsonl")
	if code, _, stderr := runCLI(t, "", "run", "--events", p); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, _ := os.ReadFile(p)
	if n := strings.Count(string(b), "\n"); n != 3 {
		t.Fatalf("%d lines in the events file: %s", n, b)
	}
}

// The real binary: PORT=0 and the listening event, SIGHUP reload, and
// SIGTERM drain with held calls — the listener stays open (new calls and
// /readyz answer 503), every accepted call is answered, exit 0.
func TestServeBinarySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tools := t.TempDir()
	_ = os.MkdirAll(filepath.Join(tools, "echo"), 0o755)
	_ = os.WriteFile(filepath.Join(tools, "echo", "tool.json"), examples.EchoManifest, 0o644)
	_ = os.WriteFile(filepath.Join(tools, "echo", "handler.wasm"), examples.EchoWasm, 0o644)
	loop := writeManifest(t, "loop", map[string]any{"id": "t.loop", "limits": map[string]any{"memMB": 16, "cpuMs": 300000}})
	b, _ := os.ReadFile(loop)
	_ = os.WriteFile(filepath.Join(tools, "loop.tool.json"), b, 0o644)
	eventsFile := filepath.Join(t.TempDir(), "events.jsonl")

	cmd := exec.Command(bin, "serve", "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--events", eventsFile)
	cmd.Env = append(os.Environ(), tokenEnv+"=  tok-123  ", "PORT=0")
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var mu sync.Mutex
	var lines, dups []string
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range dups {
			t.Error(d)
		}
	})
	seen := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if dup := duplicateKey(sc.Bytes()); dup != "" {
				mu.Lock()
				dups = append(dups, fmt.Sprintf("event line repeats key %q: %s", dup, sc.Text()))
				mu.Unlock()
			}
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				if k, _ := m["kind"].(string); k != "call" && k != "guest-log" {
					seen <- m
				}
			}
		}
		close(seen)
	}()
	waitFor := func(kind string) map[string]any {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m, ok := <-seen:
				if !ok {
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("stderr closed before %s: %s", kind, strings.Join(lines, "\n"))
				}
				if m["kind"] == kind {
					return m
				}
			case <-timeout:
				t.Fatalf("no %s event", kind)
			}
		}
	}
	port := int(waitFor("listening")["port"].(float64))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	post := func(body string, hdr ...string) (int, string, error) {
		req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", "tok-123") // trimmed
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		rb, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(rb), nil
	}
	frame := func(tool, input string) string {
		return fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":%q},"input":%s,"ctx":{"tenantId":"t","runId":"r"}}`, tool, input)
	}
	if st, body, err := post(frame("acme.echo", `{"message":"up"}`)); err != nil || st != 200 || !strings.Contains(body, `"kind":"result"`) {
		t.Fatalf("first call: %d %s %v", st, body, err)
	}

	// SIGHUP: a new manifest appears in /v1/info.
	counter := writeManifest(t, "counter", map[string]any{"id": "t.counter"})
	b, _ = os.ReadFile(counter)
	_ = os.WriteFile(filepath.Join(tools, "counter.tool.json"), b, 0o644)
	_ = cmd.Process.Signal(syscall.SIGHUP)
	if ev := waitFor("reloaded"); ev["tools"] != 3.0 {
		t.Fatalf("reloaded %v", ev)
	}
	if st, body, _ := post(frame("t.counter", `{}`)); st != 200 || !strings.Contains(body, `{"count":1}`) {
		t.Fatalf("after reload: %d %s", st, body)
	}

	// Held calls, then SIGTERM.
	const held = 3
	answers := make(chan int, held)
	for i := 0; i < held; i++ {
		go func() {
			st, _, err := post(frame("t.loop", `{}`), "kindgi-timeout-ms", "2500")
			if err != nil {
				st = -1
			}
			answers <- st
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(base + "/metrics")
		if err == nil {
			mb, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(mb), fmt.Sprintf("\nsandboxd_inflight_calls %d\n", held)) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("held calls never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor("draining")
	if st, _, err := post(frame("acme.echo", `{"message":"late"}`)); err != nil || st != 503 {
		t.Errorf("new call while draining: %d %v", st, err)
	}
	if res, err := http.Get(base + "/readyz"); err != nil || res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Errorf("readyz while draining: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	lost := 0
	for i := 0; i < held; i++ {
		if st := <-answers; st != 200 {
			lost++
		}
	}
	stopped := waitFor("stopped")
	err = cmd.Wait()
	t.Logf("drain: %d held calls, %d accepted calls lost, stopped %v", held, lost, stopped)
	if lost != 0 {
		t.Errorf("%d accepted calls lost in the drain", lost)
	}
	if err != nil {
		t.Errorf("exit: %v", err)
	}
	if stopped["abandoned"] != 0.0 {
		t.Errorf("stopped %v", stopped)
	}
	evb, _ := os.ReadFile(eventsFile)
	if !strings.Contains(string(evb), `"status":"completed"`) || !strings.Contains(string(evb), `"status":"failed"`) {
		t.Errorf("events file: %s", evb)
	}
}

// duplicateKey returns a top-level key that a JSON object line repeats
// (strict consumers reject such lines; JSON.parse silently keeps the last).
func duplicateKey(line []byte) string {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := tok.(string)
		if seen[k] {
			return k
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// Regression (issue 16 item 4): the real binary's exit after SIGTERM is
// bounded by --drain-timeout exactly. It waited up to a second more for a
// connection that never sent a request (http.Server.Shutdown's grace), and
// logged abandoned: 1 for a call answered during that grace.
func TestServeDrainBound(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tools := t.TempDir()
	loop := writeManifest(t, "loop", map[string]any{"id": "t.loop", "limits": map[string]any{"memMB": 16, "cpuMs": 300000}})
	b, _ := os.ReadFile(loop)
	_ = os.WriteFile(filepath.Join(tools, "loop.tool.json"), b, 0o644)
	const drain = 500 * time.Millisecond
	for _, tc := range []struct {
		name          string
		callTimeoutMs int // 0: no call
		wantAbandoned float64
		min, max      time.Duration
	}{
		{"idle connection, no call", 0, 0, 0, drain},
		{"a call answered inside the drain", 300, 0, 0, drain + 300*time.Millisecond},
		{"a call outliving the drain", 20000, 1, drain, drain + 600*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "serve", "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--drain-timeout", drain.String())
			cmd.Env = append(os.Environ(), tokenEnv+"=tok", "PORT=0")
			var stderr sandboxtest.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, io.Discard
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var port int
			deadline := time.Now().Add(60 * time.Second)
			for port == 0 && time.Now().Before(deadline) {
				if ev := processEvents(t, stderr.String(), "listening"); len(ev) == 1 {
					port = int(ev[0]["port"].(float64))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if port == 0 {
				t.Fatalf("no listening event: %s", stderr.String())
			}
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			idle, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)) // never sends a request
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			answered := make(chan int, 1)
			if tc.callTimeoutMs > 0 {
				go func() {
					req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(`{"v":2,"kind":"invoke","tool":{"id":"t.loop"},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`))
					req.Header.Set("content-type", "application/json")
					req.Header.Set("kindgi-pack-token", "tok")
					req.Header.Set("kindgi-timeout-ms", fmt.Sprint(tc.callTimeoutMs))
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						answered <- -1
						return
					}
					_, err = io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil {
						answered <- -1
						return
					}
					answered <- res.StatusCode
				}()
				for !strings.Contains(metrics(base), "\nsandboxd_inflight_calls 1\n") {
					if time.Now().After(deadline) {
						t.Fatal("the call never ran")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			begun := time.Now()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err = cmd.Wait()
			exited := time.Since(begun)
			st := processEvents(t, stderr.String(), "stopped")
			t.Logf("--drain-timeout %v, %s: exit after %v, stopped %v", drain, tc.name, exited, st)
			if err != nil {
				t.Errorf("exit: %v", err)
			}
			if exited < tc.min || exited > tc.max {
				t.Errorf("exit after %v, want within [%v, %v]", exited, tc.min, tc.max)
			}
			if len(st) != 1 || st[0]["abandoned"] != tc.wantAbandoned {
				t.Errorf("stopped %v, want abandoned %v", st, tc.wantAbandoned)
			}
			if tc.callTimeoutMs > 0 {
				got := <-answered
				if (tc.wantAbandoned == 0) != (got == 200) {
					t.Errorf("client got %d with abandoned %v", got, tc.wantAbandoned)
				}
			}
		})
	}
}

func metrics(base string) string {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
