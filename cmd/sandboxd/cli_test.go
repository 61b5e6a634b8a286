package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the CLI with a private compilation cache.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) > 0 && args[0] == "run" {
		args = append([]string{"run", "--cache-dir", cacheDir(t)}, args[1:]...)
	}
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

var testCache string

func cacheDir(t *testing.T) string {
	if testCache == "" {
		d, err := os.MkdirTemp("", "sandboxd-cli-cache-")
		if err != nil {
			t.Fatal(err)
		}
		testCache = d
	}
	return testCache
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testCache != "" {
		os.RemoveAll(testCache)
	}
	os.Exit(code)
}

// envelope decodes stdout, which must be exactly one JSON document.
func envelope(t *testing.T, stdout string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("stdout is not JSON: %q", stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one document: %q", stdout)
	}
	return env
}

func writeManifest(t *testing.T, fixture string, extra map[string]any) string {
	t.Helper()
	wasm, err := filepath.Abs(filepath.Join("..", "..", "testdata", "wasm", fixture+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{
		"id": "cli." + fixture, "description": "cli test", "version": "1.0.0",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": wasm},
	}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	p := filepath.Join(t.TempDir(), "tool.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunBundledExample(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "run")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s, stdout %s", code, stderr, stdout)
	}
	env := envelope(t, stdout)
	if env["v"] != float64(2) || env["kind"] != "result" {
		t.Fatalf("envelope = %v", env)
	}
	usage, _ := env["usage"].(map[string]any)
	for _, k := range []string{"cpuMs", "wallMs", "peakMemMB"} {
		if _, ok := usage[k].(float64); !ok {
			t.Fatalf("usage.%s missing: %v", k, env)
		}
	}
	if _, ok := env["output"].(map[string]any); !ok {
		t.Fatalf("output = %v", env["output"])
	}
}

func TestRunStdinInput(t *testing.T) {
	p := writeManifest(t, "echo_command", nil)
	code, stdout, stderr := runCLI(t, `{"a":[1,2]}`, "run", "--manifest", p, "--input", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	env := envelope(t, stdout)
	out, _ := json.Marshal(env["output"])
	if string(out) != `{"a":[1,2]}` {
		t.Fatalf("output %s", out)
	}
}

func TestRunErrorEnvelope(t *testing.T) {
	p := writeManifest(t, "loop", map[string]any{"limits": map[string]any{"memMB": 16, "cpuMs": 100}})
	in := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(in, []byte(`{}`), 0o600)
	code, stdout, _ := runCLI(t, "", "run", "--manifest", p, "--input", in)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	env := envelope(t, stdout)
	if env["kind"] != "error" || env["code"] != "limits-exceeded" || env["toolId"] != "cli.loop" {
		t.Fatalf("envelope = %v", env)
	}
	details, _ := env["details"].(map[string]any)
	if details["limit"] != "cpuMs" || details["declared"] != float64(100) {
		t.Fatalf("details = %v", details)
	}
}

func TestRunTimeoutFlag(t *testing.T) {
	p := writeManifest(t, "loop", map[string]any{"limits": map[string]any{"memMB": 16, "cpuMs": 60000}})
	code, stdout, _ := runCLI(t, `{}`, "run", "--manifest", p, "--input", "-", "--timeout", "150ms")
	env := envelope(t, stdout)
	if code != 1 || env["code"] != "deadline-exceeded" {
		t.Fatalf("exit %d envelope %v", code, env)
	}
}

func TestRunInvalidManifestIsEnvelope(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tool.json")
	os.WriteFile(p, []byte(`{"id":"x","description":"d","version":"one"}`), 0o600)
	code, stdout, _ := runCLI(t, `{}`, "run", "--manifest", p, "--input", "-")
	env := envelope(t, stdout)
	if code != 1 || env["code"] != "invalid-tool-definition" {
		t.Fatalf("exit %d envelope %v", code, env)
	}
	if issues, _ := env["issues"].([]any); len(issues) == 0 {
		t.Fatalf("no issues: %v", env)
	}
}

func TestUsageErrors(t *testing.T) {
	p := writeManifest(t, "echo_reactor", nil)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run", "--no-such-flag"},
		{"run", "--manifest", p},
		{"run", "--manifest", "/nonexistent/tool.json", "--input", "-"},
		{"run", "--timeout", "-1s"},
		{"run", "--refuse-posture", "lax"},
		{"run", "extra-arg"},
		{"serve", "--body-budget-mb", "0"},
		{"serve", "--body-timeout", "-1s"},
	} {
		code, stdout, stderr := runCLI(t, "", args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", args, stdout)
		}
		if stderr == "" {
			t.Errorf("%q: no diagnostic on stderr", args)
		}
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, "", "version")
	if code != 0 || !strings.HasPrefix(stdout, "sandboxd ") {
		t.Fatalf("exit %d %q", code, stdout)
	}
}
