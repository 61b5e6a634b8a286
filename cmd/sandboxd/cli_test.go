package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
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
		{"help", "frobnicate"},
		{"help", "run", "serve"},
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
	if code != 0 || !strings.HasPrefix(stdout, "sandboxd ") || !strings.Contains(stdout, runtime.Version()) {
		t.Fatalf("exit %d %q", code, stdout)
	}
	if code2, stdout2, _ := runCLI(t, "", "--version"); code2 != 0 || stdout2 != stdout {
		t.Fatalf("--version: exit %d %q, want %q", code2, stdout2, stdout)
	}
}

// The version comes from the link-time stamp, else the module version, else
// the VCS revision, else "dev"; the commit line only when one was recorded.
func TestBuildVersion(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
		{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name, stamp, main string
		settings          []debug.BuildSetting
		ok                bool
		want, commit      string
	}{
		{"stamp wins", "v1.2.3", "v0.9.0", vcs, true, "v1.2.3", "commit " + rev + " (2026-12-01T12:00:00Z), with uncommitted changes"},
		{"go install module@version", "", "v0.9.0", nil, true, "v0.9.0", ""},
		{"go build in a checkout", "", "(devel)", vcs, true, "devel-0123456789ab-dirty", "commit " + rev},
		{"clean checkout", "", "(devel)", vcs[:3], true, "devel-0123456789ab", "commit " + rev + " (2026-12-01T12:00:00Z)\n"},
		{"no VCS", "", "(devel)", nil, true, "dev", ""},
		{"no build info", "", "", nil, false, "dev", ""},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/sandboxd/sandboxd", Version: tc.main}, Settings: tc.settings}
		if got := buildVersion(tc.stamp, bi, tc.ok); got != tc.want {
			t.Errorf("%s: version %q, want %q", tc.name, got, tc.want)
		}
		text := versionText(tc.stamp, bi, tc.ok)
		if !strings.HasPrefix(text, "sandboxd "+tc.want+"\n") {
			t.Errorf("%s: text %q", tc.name, text)
		}
		if tc.commit != "" && !strings.Contains(text, tc.commit) || tc.commit == "" && strings.Contains(text, "commit") {
			t.Errorf("%s: text %q, want commit line %q", tc.name, text, tc.commit)
		}
	}
}

// make build's flags (read from make -n) stamp the version and record the
// commit: a binary built with them reports both.
func TestVersionStampedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	need := func(tool string) string {
		p, err := exec.LookPath(tool)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed; CI=true requires it", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
		return p
	}
	makeBin, gitBin := need("make"), need("git")
	head, err := exec.Command(gitBin, "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("not a git checkout: %v", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	dry := exec.Command(makeBin, "-n", "build", "VERSION=v9.8.7-test")
	dry.Dir = filepath.Join("..", "..")
	plan, err := dry.Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	line := strings.TrimSpace(string(plan))
	if !strings.Contains(line, "-ldflags '-X main.stampedVersion=v9.8.7-test'") || !strings.Contains(line, "-buildvcs=auto") {
		t.Fatalf("make build does not stamp the version: %s", line)
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	// The same flags (without -trimpath, which would rebuild every package
	// for this test alone).
	build := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", "-X main.stampedVersion=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandboxd version:\n%s", out)
	if !strings.HasPrefix(string(out), "sandboxd v9.8.7-test\ncommit "+strings.TrimSpace(string(head))) {
		t.Fatalf("version = %q, want the stamp and commit %s", out, head)
	}
}

// Help that was asked for is output: the same text on stdout, exit 0,
// whichever way it was asked; bad flags print usage on stderr, exit 2.
func TestHelpStreams(t *testing.T) {
	for _, name := range []string{"run", "serve", "conformance", "push", "pull", "inspect"} {
		want := ""
		for _, args := range [][]string{{"help", name}, {name, "--help"}, {name, "-h"}, {"--help", name}} {
			code, stdout, stderr := runCLI(t, "", args...)
			if code != 0 || stderr != "" || !strings.Contains(stdout, "sandboxd "+name) {
				t.Errorf("%q: exit %d, stdout %d bytes, stderr %q", args, code, len(stdout), stderr)
				continue
			}
			if want == "" {
				want = stdout
			} else if stdout != want {
				t.Errorf("%q printed other help than %q", args, []string{"help", name})
			}
		}
	}
	code, stdout, stderr := runCLI(t, "", "help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "sandboxd help COMMAND") {
		t.Errorf("help: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", "help", "frobnicate")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
