//go:build unix

package main

import (
	"encoding/json"
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

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// Extism plug-ins under `sandboxd serve` (the real binary, the pack
// protocol): go-sdk v1.7.1's own published test plug-ins, read from the Go
// module cache as executor/extism_test.go reads them, and a raw-ABI WAT
// plug-in with two exports backing two tools of one pack index.

const extismSDKModule = "github.com/extism/go-sdk@v1.7.1"

// goSDKPlugin returns the path of go-sdk's wasm/NAME in the module cache;
// under CI=true a missing copy fails (.ci/deps.d/20-extism.sh downloads it).
func goSDKPlugin(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	p := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(extismSDKModule), "wasm", name)
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s's wasm/%s is not in the module cache (go mod download %s): %v", extismSDKModule, name, extismSDKModule, err)
		}
		t.Skipf("%s's wasm/%s is not in the module cache: %v", extismSDKModule, name, err)
	}
	return p
}

func writeFile(t *testing.T, dst string, b []byte) {
	t.Helper()
	_ = os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, b)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// invoker posts pack-protocol invoke frames to a served process.
func invoker(t *testing.T, p *servedProcess) func(tool, input string) (int, string) {
	ev := p.waitEvent("listening", nil)
	base := fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
	client := &http.Client{Timeout: 60 * time.Second}
	return func(tool, input string) (int, string) {
		t.Helper()
		body := fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":%q},"input":%s,"ctx":{"tenantId":"t1","runId":"r1"}}`, tool, input)
		req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("kindgi-pack-token", "tok-123")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
}

func stopServe(t *testing.T, p *servedProcess) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("serve exit %d:\n%s", code, p.output())
	}
}

// TestServeExtismPlugins: serve --tools --dev runs go-sdk's Rust
// count_vowels with the output Extism's extism_test.go expects (3 vowels
// in "hello world", the running total in a var that context-isolated
// empties per call) and its C fail plug-in as handler-throw (cause
// handler-error, returned 1) with Extism's error text; a tools directory holding go-sdk's host.wasm
// (it imports an Extism host function) does not boot: boot-failed,
// handler-shape-invalid naming the import.
func TestServeExtismPlugins(t *testing.T) {
	tools := t.TempDir()
	manifest := func(id, file string, output map[string]any) map[string]any {
		return map[string]any{
			"id": id, "version": "1.0.0", "description": "go-sdk's " + file,
			"input": map[string]any{"type": "string"}, "output": output,
			"sandbox": "context-isolated", "limits": map[string]any{"memMB": 64, "cpuMs": 5000},
			"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": file},
		}
	}
	copyFile(t, goSDKPlugin(t, "count_vowels.wasm"), filepath.Join(tools, "count_vowels.wasm"))
	copyFile(t, goSDKPlugin(t, "fail.wasm"), filepath.Join(tools, "fail.wasm"))
	writeJSON(t, filepath.Join(tools, "count-vowels.tool.json"), manifest("extism.count-vowels", "count_vowels.wasm#count_vowels", map[string]any{"type": "object"}))
	writeJSON(t, filepath.Join(tools, "fail.tool.json"), manifest("extism.fail", "fail.wasm", map[string]any{}))

	p := startServe(t, "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0")
	invoke := invoker(t, p)
	for _, input := range []string{`"hello world"`, `"bbba"`} {
		want := map[string]string{
			`"hello world"`: `{"v":2,"kind":"result","output":{"count":3,"total":3,"vowels":"aeiouAEIOU"}}`,
			`"bbba"`:        `{"v":2,"kind":"result","output":{"count":1,"total":1,"vowels":"aeiouAEIOU"}}`,
		}[input]
		status, body := invoke("extism.count-vowels", input)
		t.Logf("count_vowels %s: %d %s", input, status, body)
		if status != 200 || body != want {
			t.Fatalf("count_vowels %s: %d %s, want %s", input, status, body, want)
		}
	}
	status, body := invoke("extism.fail", `""`)
	t.Logf("fail: %d %s", status, body)
	var frame struct {
		Kind, Code, Message string
		Cause               struct {
			Name     string
			Returned int
		}
	}
	// The pack protocol's code for a handler's own failure is handler-throw;
	// sandboxd's code rides in cause.name.
	if err := json.Unmarshal([]byte(body), &frame); err != nil || status != 200 || frame.Kind != "error" || frame.Code != "handler-throw" ||
		frame.Cause.Name != "handler-error" || frame.Cause.Returned != 1 || !strings.Contains(frame.Message, "Some error message") {
		t.Fatalf("fail: %d %s", status, body)
	}
	stopServe(t, p)

	// A plug-in that needs an Extism host function is refused at boot.
	copyFile(t, goSDKPlugin(t, "host.wasm"), filepath.Join(tools, "host.wasm"))
	writeJSON(t, filepath.Join(tools, "host.tool.json"), manifest("extism.host", "host.wasm", map[string]any{}))
	cmd := exec.Command(sandboxdBinary(t), "serve", "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), tokenEnv+"=tok-123")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := runBounded(t, cmd, 60*time.Second)
	ev := processEvents(t, stderr.String(), "boot-failed")
	t.Logf("host.wasm: %v; %v", err, ev)
	if err == nil || len(ev) != 1 || !strings.Contains(fmt.Sprint(ev[0]["problems"]), "handler-shape-invalid") ||
		!strings.Contains(fmt.Sprint(ev[0]["problems"]), "extism:host/user") {
		t.Fatalf("host.wasm: %v\n%s", err, stderr.String())
	}
}

// runBounded runs cmd, killing it after limit.
func runBounded(t *testing.T, cmd *exec.Cmd, limit time.Duration) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running after %v", limit)
		return nil
	}
}

// TestServeExtismIndexEntries: a pack index whose tools name one Extism
// module with two exports by a #NAME suffix on modulePath — directly
// (plugins/two.wasm#echo, #shout) and through --bundle-map
// (src/two.ts#shout → dist/two.wasm) — boots, and each tool runs its own
// export.
func TestServeExtismIndexEntries(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "dist")
	writeFile(t, filepath.Join(root, "plugins", "two.wasm"), sandboxtest.WATFile(t, "testdata/wasm/extism/two_exports.wat"))
	copyFile(t, filepath.Join(root, "plugins", "two.wasm"), filepath.Join(root, "bundled", "two.wasm"))
	str := map[string]any{"type": "string"}
	tool := func(id, mp string) map[string]any {
		return map[string]any{"id": id, "description": "two_exports.wat via " + mp, "input": str, "output": str,
			"modulePath": mp, "sandbox": "strict", "limits": map[string]any{"memMB": 16, "cpuMs": 1000}}
	}
	writeJSON(t, filepath.Join(dir, "index.json"), map[string]any{
		"v": 1, "packId": "acme", "packVersion": "1.0.0", "artifactVersion": "1", "publishedAt": "2026-12-01T00:00:00.000Z",
		"tools": []any{
			tool("acme.echo", "plugins/two.wasm#echo"),
			tool("acme.shout", "plugins/two.wasm#shout"),
			tool("acme.shout-bundled", "src/two.ts#shout"),
		},
		"guardrails": []any{}, "agents": []any{}, "flows": []any{},
	})
	writeJSON(t, filepath.Join(root, "bundle-map.json"), map[string]string{"src/two.ts": "bundled/two.wasm"})

	p := startServe(t, "--index", filepath.Join(dir, "index.json"), "--module-root", root,
		"--bundle-map", filepath.Join(root, "bundle-map.json"), "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0")
	invoke := invoker(t, p)
	for _, tc := range []struct{ tool, want string }{
		{"acme.echo", `{"v":2,"kind":"result","output":"hello world"}`},
		{"acme.shout", `{"v":2,"kind":"result","output":"HELLO WORLD"}`},
		{"acme.shout-bundled", `{"v":2,"kind":"result","output":"HELLO WORLD"}`},
	} {
		status, body := invoke(tc.tool, `"hello world"`)
		t.Logf("%s: %d %s", tc.tool, status, body)
		if status != 200 || body != tc.want {
			t.Fatalf("%s: %d %s, want %s", tc.tool, status, body, tc.want)
		}
	}
	stopServe(t, p)
}
