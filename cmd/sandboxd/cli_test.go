package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// runCLI runs the CLI with a private compilation cache.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) > 0 && args[0] == "run" {
		args = append([]string{"run", "--cache-dir", sandboxtest.CacheDir(t)}, args[1:]...)
	}
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// cacheDir is sandboxtest.CacheDir, kept under its old name for the tests
// still being written against it.
func cacheDir(t testing.TB) string { t.Helper(); return sandboxtest.CacheDir(t) }

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
	if fi, err := os.Stat(wasm); err == nil {
		sandboxtest.SkipShort(t, fixture, fi.Size())
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
	sandboxtest.SkipShort(t, "examples/echo/handler.wasm", int64(len(examples.EchoWasm)))
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
	// Golden text: the deadline's length and the flag that set it.
	if want := "the call ran past its 150ms deadline (--timeout)"; env["message"] != want {
		t.Fatalf("message\n got %q\nwant %q", env["message"], want)
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

// examples/index/README.md's command: serve --index on the example pack
// index; every tool answers, /v1/info names the index's pack, and the
// routes' token rules are those docs/http.md states.
func TestServeIndexExample(t *testing.T) {
	sandboxtest.SkipShort(t, "examples/echo/handler.wasm", int64(len(examples.EchoWasm)))
	t.Setenv(tokenEnv, "dev-token")
	t.Setenv("PORT", "0")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr sandboxtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--index", filepath.Join("..", "..", "examples", "index", "index.json"),
			"--module-root", filepath.Join("..", "..", "examples"), "--cache-dir", sandboxtest.CacheDir(t)}, strings.NewReader(""), &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("serve exit %d: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s of SIGTERM")
		}
	}()
	var port int
	for deadline := time.Now().Add(60 * time.Second); port == 0; time.Sleep(20 * time.Millisecond) {
		if ev := processEvents(t, stderr.String(), "listening"); len(ev) == 1 {
			port = int(ev[0]["port"].(float64))
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before listening: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening event within 60s: %s", stderr.String())
		}
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("kindgi-pack-token", token)
		}
		if body != "" {
			req.Header.Set("content-type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ tool, input, want string }{
		{"acme.echo", `{"message":"hi","repeat":2}`, `"output":{"echo":"hihi","length":4}`},
		{"acme.identity", `{"value":[1,"a"]}`, `"output":{"value":[1,"a"]}`},
		{"acme.lookup", `{"id":7}`, `no such item`},
	} {
		code, body := call("POST", "/v1/invoke", "dev-token",
			`{"v":2,"kind":"invoke","tool":{"id":"`+tc.tool+`","version":"1.0.0"},"input":`+tc.input+`,"ctx":{"tenantId":"t1","runId":"r1"}}`)
		if code != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("%s: HTTP %d %s, want %s", tc.tool, code, body, tc.want)
		}
	}
	code, body := call("GET", "/v1/info", "dev-token", "")
	var info struct {
		PackID, PackVersion, ArtifactVersion string
		Tools                                []struct{ ID, Version string }
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != http.StatusOK ||
		info.PackID != "acme" || info.ArtifactVersion != "20261201.1" || len(info.Tools) != 3 {
		t.Errorf("/v1/info: HTTP %d %s", code, body)
	}
	for _, rt := range []struct {
		method, path string
		open         bool
	}{
		{"GET", "/v1/info", false}, {"GET", "/v1/tools", false}, {"POST", "/v1/invoke", false},
		{"GET", "/healthz", true}, {"GET", "/readyz", true}, {"GET", "/metrics", true},
	} {
		body := ""
		if rt.method == "POST" {
			body = `{}`
		}
		code, _ := call(rt.method, rt.path, "", body)
		if rt.open && code != http.StatusOK || !rt.open && code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: HTTP %d, want open=%v", rt.method, rt.path, code, rt.open)
		}
	}
}

// examples/index/index.json is a valid pack index (the vendored schema).
func TestIndexExampleMatchesSchema(t *testing.T) {
	root := filepath.Join("..", "..")
	f, err := os.Open(filepath.Join(root, "spec", "kindgi-pack-index.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(lookaheadRegexp)
	const url = "https://kindgi.com/schemas/v1/pack-index.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "examples", "index", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("examples/index/index.json: %v", err)
	}
}

// lookaheadRegexp compiles the schema's patterns with Go's regexp, plus the
// one ECMAScript form it uses that RE2 lacks: a leading negative lookahead
// of a literal, "^(?!KINDGI_)…".
func lookaheadRegexp(src string) (jsonschema.Regexp, error) {
	if rest, ok := strings.CutPrefix(src, "^(?!"); ok {
		if lit, tail, ok := strings.Cut(rest, ")"); ok && regexp.QuoteMeta(lit) == lit {
			re, err := regexp.Compile("^" + tail)
			if err != nil {
				return nil, err
			}
			return notPrefixedRegexp{re, lit, src}, nil
		}
	}
	return regexp.Compile(src)
}

type notPrefixedRegexp struct {
	re          *regexp.Regexp
	prefix, src string
}

func (n notPrefixedRegexp) MatchString(s string) bool {
	return !strings.HasPrefix(s, n.prefix) && n.re.MatchString(s)
}

func (n notPrefixedRegexp) String() string { return n.src }

// An allowlist entry with a path is one clear error: what is wrong, once.
func TestAllowlistPathOneError(t *testing.T) {
	p := writeManifest(t, "echo_reactor", map[string]any{
		"network": map[string]any{"kind": "allowlist", "hosts": []string{"https://api.example.com/v1"}}})
	code, stdout, _ := runCLI(t, `{}`, "run", "--manifest", p, "--input", "-")
	env := envelope(t, stdout)
	msg, _ := env["message"].(string)
	if code != exitError || env["code"] != "invalid-tool-definition" || strings.Count(msg, "no path") != 1 ||
		strings.Contains(msg, "CIDR:") || strings.Count(msg, "network.hosts[0]") != 1 {
		t.Fatalf("exit %d, envelope %v", code, env)
	}
	t.Logf("message: %s", msg)
}
