package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// firstHourTemplates are the templates TestFirstHour writes, the DIR each
// gets (its tool id) and the programs its make needs.
var firstHourTemplates = []struct {
	dir, lang, kind string
	needs           []string
}{
	{"greet", "go", "tool", []string{"go", "make"}},
	{"min-length", "go", "check", []string{"go", "make"}},
	{"echo-c", "c", "tool", []string{"clang", "wasm-ld", "make"}},
	{"echo-wat", "wat", "tool", []string{"wat2wasm", "make"}},
	{"greet-extism", "extism-go", "tool", []string{"go", "make"}},
	{"echo-as", "assemblyscript", "tool", []string{"npm", "make"}},
}

// TestFirstHour is README "Your first tool", run as written by a new user,
// from a directory outside the repository: sandboxd init for every
// template, make, run, conformance; then index, push-pack to a loopback
// registry, serve --index oci://… with an invoke of every tool and a
// check-invoke of the check, and sandboxd mcp --index oci://… with a
// tools/call of every tool. A template whose toolchain is missing is
// skipped, except under CI=true, where it fails. The steps are logged as a
// transcript (go test -v -run TestFirstHour).
func TestFirstHour(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary and every template's guest")
	}
	bin := sandboxdBinary(t)
	work := t.TempDir()
	if repo, _ := filepath.Abs(filepath.Join("..", "..")); strings.HasPrefix(work, repo+string(filepath.Separator)) {
		t.Fatalf("the temporary directory %s is inside the repository", work)
	}
	const token = "dev-token"
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	env := append(os.Environ(), "KINDGI_PACK_SERVICE_TOKEN="+token, "XDG_CACHE_HOME="+filepath.Join(work, ".cache"), "GOWORK=off")
	var transcript strings.Builder
	logf := func(format string, a ...any) {
		fmt.Fprintf(&transcript, format+"\n", a...)
	}
	defer func() { t.Logf("transcript:\n%s", transcript.String()) }()
	// sh runs one command in dir as README shows it and returns its stdout.
	sh := func(dir string, name string, args ...string) string {
		t.Helper()
		rel, _ := filepath.Rel(work, dir)
		logf("%s$ %s %s", strings.TrimPrefix(rel+" ", ". "), name, strings.Join(args, " "))
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		for _, s := range []string{out.String(), errb.String()} {
			if s = strings.TrimSpace(s); s != "" {
				logf("%s", clipLines(s, 40))
			}
		}
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, transcript.String())
		}
		return out.String()
	}

	tools := filepath.Join(work, "tools")
	var built []string // tool ids
	checkID := ""
	for _, tp := range firstHourTemplates {
		if missing := missingPrograms(tp.needs); len(missing) > 0 {
			if os.Getenv("CI") == "true" {
				t.Fatalf("template %s needs %s; CI=true requires it (.ci/run installs it)", tp.lang, strings.Join(missing, ", "))
			}
			t.Logf("SKIPPED template %s %s: %s not installed", tp.lang, tp.kind, strings.Join(missing, ", "))
			continue
		}
		args := []string{"init", "--lang", tp.lang}
		if tp.kind == "check" {
			args = append(args, "--kind", "check")
		}
		sh(work, "sandboxd", append(args, "tools/"+tp.dir)...)
		dir := filepath.Join(tools, tp.dir)
		sh(dir, "make")
		out := sh(dir, "sandboxd", "run", "--manifest", "tool.json", "--input", "input.json")
		var res map[string]any
		if json.Unmarshal([]byte(out), &res) != nil || res["kind"] != "result" {
			t.Fatalf("%s: run printed %s", tp.lang, out)
		}
		out = sh(dir, "sandboxd", "conformance", ".")
		if !strings.Contains(out, "PASSED:") || strings.Contains(out, "WARN") || strings.Contains(out, "SKIP") {
			t.Fatalf("%s: conformance:\n%s", tp.lang, out)
		}
		if tp.kind == "check" {
			checkID = tp.dir
		} else {
			built = append(built, tp.dir)
		}
	}
	if len(built) == 0 {
		t.Skip("no template's toolchain is installed")
	}

	sh(work, "sandboxd", "index", "--tools", "tools", "--pack-id", "first-hour", "--pack-version", "0.1.0")
	reg := registrytest.Start(t)
	ref := reg.Host + "/first-hour/pack:0.1.0"
	pinned := strings.TrimSpace(sh(work, "sandboxd", "push-pack", "--index", "tools/index.json", ref, "--insecure-registry", reg.Host))
	if !strings.Contains(pinned, "@sha256:") {
		t.Fatalf("push-pack printed %q", pinned)
	}

	// serve --index oci://… and one invoke per tool, one check-invoke.
	logf("$ sandboxd serve --index oci://%s --insecure-registry %s --addr 127.0.0.1:0 &", ref, reg.Host)
	serve := exec.Command(bin, "serve", "--index", "oci://"+ref, "--insecure-registry", reg.Host, "--addr", "127.0.0.1:0")
	serve.Dir, serve.Env = work, env
	port := startListening(t, serve)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	post := func(body string) map[string]any {
		t.Helper()
		logf("$ curl -s %s/v1/invoke -H 'content-type: application/json' -H 'kindgi-pack-token: %s' -d '%s'", base, token, body)
		req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		logf("%s", strings.TrimSpace(string(b)))
		var m map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("invoke: %d %s", resp.StatusCode, b)
		}
		return m
	}
	for _, id := range built {
		input, err := os.ReadFile(filepath.Join(tools, id, "input.json"))
		if err != nil {
			t.Fatal(err)
		}
		m := post(fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":%q},"input":%s,"ctx":{"tenantId":"t1","runId":"r1"}}`, id, bytes.TrimSpace(input)))
		if m["kind"] != "result" {
			t.Fatalf("%s over serve: %v", id, m)
		}
	}
	if checkID != "" {
		m := post(fmt.Sprintf(`{"v":2,"kind":"check-invoke","check":{"id":%q},"config":{"minLength":3},"trace":{"runId":"r1","tenantId":"t1","mode":"agent","output":"hello","toolCalls":[],"toolResults":[],"modelCalls":[]}}`, checkID))
		if res, _ := m["result"].(map[string]any); m["kind"] != "check-result" || res["passed"] != true {
			t.Fatalf("check-invoke: %v", m)
		}
	}

	// sandboxd mcp --index oci://… (what an MCP client spawns) and a
	// tools/call per tool.
	logf("$ sandboxd mcp --index oci://%s --insecure-registry %s   # spawned by the MCP client", ref, reg.Host)
	mc := exec.Command(bin, "mcp", "--index", "oci://"+ref, "--insecure-registry", reg.Host)
	mc.Dir, mc.Env = work, env
	call := mcpSession(t, mc, logf)
	call("initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"first-hour","version":"1"}}`)
	call("notifications/initialized", "")
	for _, id := range built {
		input, _ := os.ReadFile(filepath.Join(tools, id, "input.json"))
		res := call("tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, id, bytes.TrimSpace(input)))
		if r, _ := res["result"].(map[string]any); r == nil || r["isError"] == true || r["structuredContent"] == nil {
			t.Fatalf("%s over MCP: %v", id, res)
		}
	}
}

func missingPrograms(names []string) []string {
	var out []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			out = append(out, n)
		}
	}
	return out
}

func clipLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… (%d more lines)", len(lines)-n)
}

// startListening starts a serve process and returns the port of its
// listening event; the process is killed at the end of the test.
func startListening(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ports := make(chan int, 1)
	var mu sync.Mutex
	var lines []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["kind"] == "listening" {
				if p, ok := m["port"].(float64); ok {
					ports <- int(p)
				}
			}
		}
		close(ports)
	}()
	select {
	case p, ok := <-ports:
		if ok {
			return p
		}
	case <-time.After(2 * time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("serve did not listen:\n%s", strings.Join(lines, "\n"))
	return 0
}

// mcpSession starts an MCP stdio server and returns a function that sends
// one JSON-RPC request (a notification when method starts with
// "notifications/") and returns its answer.
func mcpSession(t *testing.T, cmd *exec.Cmd, logf func(string, ...any)) func(method, params string) map[string]any {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	answers := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				logf("%s", sc.Text())
				answers <- m
			}
		}
		close(answers)
	}()
	id := 0
	return func(method, params string) map[string]any {
		t.Helper()
		var msg string
		if strings.HasPrefix(method, "notifications/") {
			msg = fmt.Sprintf(`{"jsonrpc":"2.0","method":%q}`, method)
		} else {
			id++
			msg = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
		}
		logf("→ %s", msg)
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatalf("mcp stdin: %v\n%s", err, errb.String())
		}
		if strings.HasPrefix(method, "notifications/") {
			return nil
		}
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case m, ok := <-answers:
				if !ok {
					t.Fatalf("mcp exited before answering %s:\n%s", method, errb.String())
				}
				if n, _ := m["id"].(float64); int(n) == id {
					return m
				}
			case <-timeout:
				t.Fatalf("no answer to %s:\n%s", method, errb.String())
			}
		}
	}
}
