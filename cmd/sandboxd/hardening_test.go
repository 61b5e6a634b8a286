//go:build unix

package main

import (
	"bytes"
	"encoding/json"
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

var builtBinary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// sandboxdBinary builds the CLI once per test run.
func sandboxdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	builtBinary.once.Do(func() {
		d, err := os.MkdirTemp("", "sandboxd-bin-")
		if err != nil {
			builtBinary.err = err
			return
		}
		builtBinary.path = filepath.Join(d, "sandboxd")
		builtBinary.out, builtBinary.err = exec.Command("go", "build", "-o", builtBinary.path, ".").CombinedOutput()
	})
	if builtBinary.err != nil {
		t.Fatalf("go build: %v\n%s", builtBinary.err, builtBinary.out)
	}
	return builtBinary.path
}

// signalled starts cmd, sends SIGTERM after delay and returns the exit code,
// how long after the signal the process exited, and its stdout and stderr.
// The process is killed after limit.
func signalled(t *testing.T, cmd *exec.Cmd, delay, limit time.Duration) (code int, afterSignal time.Duration, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("exited before the signal (%v): %s %s", err, out.String(), errb.String())
	case <-time.After(delay):
	}
	sent := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running %v after SIGTERM; stderr: %s", limit, errb.String())
	}
	return cmd.ProcessState.ExitCode(), time.Since(sent), out.String(), errb.String()
}

// TestRunSIGTERMSpinningGuest: `run` exits promptly on SIGTERM while a
// hostile guest spins with a 300 s CPU budget and a 10 min deadline; the
// envelope says cancelled.
func TestRunSIGTERMSpinningGuest(t *testing.T) {
	bin := sandboxdBinary(t)
	m := writeManifest(t, "loop", map[string]any{"limits": map[string]any{"memMB": 16, "cpuMs": 300000}})
	in := writeInput(t, "{}")
	cmd := exec.Command(bin, "run", "--no-cache", "--timeout", "10m", "--manifest", m, "--input", in)
	code, after, stdout, stderr := signalled(t, cmd, 1500*time.Millisecond, 5*time.Second)
	t.Logf("exit %d %v after SIGTERM: %s", code, after, strings.TrimSpace(stdout))
	if code != exitError || !strings.Contains(stdout, `"code":"cancelled"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if after > 2*time.Second {
		t.Fatalf("exited %v after SIGTERM", after)
	}
}

// bigGoGuest is the largest fixture: a 10 MB Go reactor that takes seconds
// to meter and compile without a cache.
func bigGoGuest(t *testing.T) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "testdata", "wasm", "http_fetch_reactor.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunSIGTERMDuringCompile: `run` exits on SIGTERM while the module is
// still being metered or compiled (wazero's compiler cannot be interrupted;
// sandboxd stops waiting for it) — F16.
func TestRunSIGTERMDuringCompile(t *testing.T) {
	bin := sandboxdBinary(t)
	b, _ := json.Marshal(map[string]any{
		"id": "cli.big", "description": "big", "version": "1.0.0",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": bigGoGuest(t)},
	})
	m := filepath.Join(t.TempDir(), "tool.json")
	_ = os.WriteFile(m, b, 0o600)
	cmd := exec.Command(bin, "run", "--no-cache", "--manifest", m, "--input", writeInput(t, "{}"))
	code, after, stdout, _ := signalled(t, cmd, 300*time.Millisecond, 5*time.Second)
	t.Logf("exit %d %v after SIGTERM: %s", code, after, strings.TrimSpace(stdout))
	if code != exitError || !strings.Contains(stdout, `"code":"cancelled"`) {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	if after > time.Second {
		t.Fatalf("exited %v after SIGTERM", after)
	}
}

// TestServeSIGTERMDuringBoot: serve exits 0 promptly on SIGTERM while its
// boot is still compiling a large module.
func TestServeSIGTERMDuringBoot(t *testing.T) {
	bin := sandboxdBinary(t)
	dir := t.TempDir()
	var em map[string]json.RawMessage
	_ = json.Unmarshal(examples.EchoManifest, &em)
	wasm, _ := os.ReadFile(bigGoGuest(t))
	_ = os.WriteFile(filepath.Join(dir, "big.wasm"), wasm, 0o600)
	idx, _ := json.Marshal(map[string]any{"v": 1, "packId": "p", "packVersion": "1.0.0", "artifactVersion": "a",
		"tools": []any{map[string]any{"id": "t.big", "input": em["input"], "output": em["output"], "modulePath": "big.wasm"}}})
	_ = os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o600)
	cmd := exec.Command(bin, "serve", "--no-cache", "--index", filepath.Join(dir, "index.json"), "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), tokenEnv+"=tok")
	code, after, _, stderr := signalled(t, cmd, 300*time.Millisecond, 5*time.Second)
	t.Logf("exit %d %v after SIGTERM; stderr: %s", code, after, strings.TrimSpace(stderr))
	if code != exitOK || strings.Contains(stderr, `"listening"`) {
		t.Fatalf("exit %d (want 0 before listening), stderr %s", code, stderr)
	}
	if after > time.Second {
		t.Fatalf("exited %v after SIGTERM", after)
	}
}

// TestF13FIFOModulePath: a FIFO at a module path fails `run` and serve's
// boot at once (open(2) of a FIFO without a writer used to block forever).
func TestF13FIFOModulePath(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.wasm"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type outcome struct {
		code           int
		stdout, stderr string
	}
	bounded := func(name string, fn func() outcome) outcome {
		t.Helper()
		ch := make(chan outcome, 1)
		start := time.Now()
		go func() { ch <- fn() }()
		select {
		case o := <-ch:
			t.Logf("%s: exit %d in %v", name, o.code, time.Since(start))
			return o
		case <-time.After(10 * time.Second):
			t.Fatalf("%s blocked on the FIFO for 10 s", name)
		}
		return outcome{}
	}
	b, _ := json.Marshal(map[string]any{"id": "redteam.fifo", "version": "1.0.0", "description": "x",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "fifo.wasm"}})
	m := filepath.Join(dir, "fifo.json")
	_ = os.WriteFile(m, b, 0o600)
	o := bounded("run", func() outcome {
		c, so, se := runCLI(t, "{}", "run", "--manifest", m, "--input", "-")
		return outcome{c, so, se}
	})
	if o.code != exitError || !strings.Contains(o.stdout, `"code":"artifact-unavailable"`) || !strings.Contains(o.stdout, "FIFO") {
		t.Fatalf("run: exit %d, stdout %s", o.code, o.stdout)
	}
	idx, _ := json.Marshal(map[string]any{"v": 1, "packId": "p", "packVersion": "1.0.0", "artifactVersion": "a",
		"tools": []any{map[string]any{"id": "t.x", "input": map[string]any{"type": "object"}, "output": map[string]any{}, "modulePath": "fifo.wasm"}}})
	_ = os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o600)
	t.Setenv(tokenEnv, "tok")
	o = bounded("serve --index", func() outcome {
		c, so, se := runCLI(t, "", "serve", "--index", filepath.Join(dir, "index.json"), "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0")
		return outcome{c, so, se}
	})
	if o.code != exitError || len(processEvents(t, o.stderr, "boot-failed")) != 1 || !strings.Contains(o.stderr, "not a regular file") {
		t.Fatalf("serve: exit %d, stderr %s", o.code, o.stderr)
	}
}

// TestOperatorCeilings: --max-mem-mb / --max-cpu-ms refuse a manifest
// declaring more at load (policy-refused, details name the limit); the
// defaults are 1024 MiB and 300,000 ms; defaults above the ceilings are a
// usage error.
func TestOperatorCeilings(t *testing.T) {
	in := writeInput(t, "{}")
	for _, tc := range []struct {
		name   string
		limits map[string]any
		flags  []string
		want   string // "" for success
		limit  string
	}{
		{"memMB over the default ceiling", map[string]any{"memMB": 2048, "cpuMs": 1000}, nil, "policy-refused", "memMB"},
		{"memMB under a raised ceiling", map[string]any{"memMB": 2048, "cpuMs": 1000}, []string{"--max-mem-mb", "4096"}, "", ""},
		{"memMB over a lowered ceiling", map[string]any{"memMB": 64, "cpuMs": 1000}, []string{"--max-mem-mb", "32", "--default-mem-mb", "16"}, "policy-refused", "memMB"},
		{"cpuMs over the default ceiling", map[string]any{"memMB": 16, "cpuMs": 600000}, nil, "policy-refused", "cpuMs"},
		{"cpuMs over a lowered ceiling", map[string]any{"memMB": 16, "cpuMs": 5000}, []string{"--max-cpu-ms", "1000", "--default-cpu-ms", "500"}, "policy-refused", "cpuMs"},
		{"no cpu ceiling", map[string]any{"memMB": 16, "cpuMs": 600000}, []string{"--max-cpu-ms", "0"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := writeManifest(t, "echo_reactor", map[string]any{"limits": tc.limits})
			code, stdout, stderr := runCLI(t, "", append(append([]string{"run"}, tc.flags...), "--manifest", m, "--input", in)...)
			env := envelope(t, stdout)
			if tc.want == "" {
				if code != exitOK {
					t.Fatalf("exit %d: %s %s", code, stdout, stderr)
				}
				return
			}
			details, _ := env["details"].(map[string]any)
			if code != exitError || env["code"] != tc.want || details["limit"] != tc.limit {
				t.Fatalf("exit %d, envelope %s", code, stdout)
			}
		})
	}
	code, _, stderr := runCLI(t, "", "run", "--default-mem-mb", "2000", "--manifest", writeManifest(t, "echo_reactor", nil), "--input", in)
	if code != exitUsage || !strings.Contains(stderr, "--max-mem-mb") {
		t.Fatalf("default above the ceiling: exit %d, %s", code, stderr)
	}
}
