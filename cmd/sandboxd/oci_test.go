package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// ociManifest writes a tool manifest whose codeArtifactRef is an oci ref.
func ociManifest(t *testing.T, imageRef, modulePath, version string, extra map[string]any) string {
	t.Helper()
	m := map[string]any{
		"id": "cli.oci", "description": "oci test", "version": "1.0.0",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "oci", "imageRef": imageRef, "modulePath": modulePath, "artifactVersion": version},
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

func writeInput(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOCIPushPullRun is the end-to-end round trip against a real registry
// process: push a fixture, pull and inspect it, run a manifest whose
// codeArtifactRef is oci, then run it again pinned with the registry down.
func TestOCIPushPullRun(t *testing.T) {
	reg := registrytest.Start(t)
	host := reg.Host
	fixture := filepath.Join("..", "..", "testdata", "wasm", "echo_reactor.wasm")
	pushCache, pullCache, runCache := t.TempDir()+"/c", t.TempDir()+"/c", t.TempDir()+"/c"
	tag := host + "/acme/echo:1.2.0"

	code, stdout, stderr := runCLI(t, "", "push", fixture, tag, "--artifact-version", "20261129.1", "--insecure-registry", host, "--artifact-cache-dir", pushCache)
	if code != 0 {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	pinned := strings.TrimSpace(stdout)
	if !strings.HasPrefix(pinned, host+"/acme/echo@sha256:") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("push printed %q", stdout)
	}

	code, stdout, stderr = runCLI(t, "", "pull", pinned, "--insecure-registry", host, "--artifact-cache-dir", pullCache)
	if code != 0 || strings.TrimSpace(stdout) != pinned {
		t.Fatalf("pull: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, "", "inspect", tag, "--insecure-registry", host, "--artifact-cache-dir", runCache)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	for _, want := range []string{pinned, "20261129.1", "application/vnd.wasm.config.v0+json", "application/wasm", "echo_reactor.wasm", "261 bytes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, stdout)
		}
	}

	in := writeInput(t, `{"message":"hi"}`)
	run := func(manifest, cache string) map[string]any {
		t.Helper()
		_, stdout, _ := runCLI(t, "", "run", "--manifest", manifest, "--input", in, "--insecure-registry", host, "--artifact-cache-dir", cache)
		return envelope(t, stdout)
	}
	env := run(ociManifest(t, tag, "echo_reactor.wasm", "20261129.1", nil), runCache)
	if env["kind"] != "result" {
		t.Fatalf("run by tag: %v", env)
	}
	if out, _ := json.Marshal(env["output"]); string(out) != `{"message":"hi"}` {
		t.Fatalf("output %s", out)
	}

	// Policy and integrity failures come back as envelopes with their codes.
	for _, c := range []struct {
		name, ref, path, version, posture, code string
	}{
		{"strict needs a digest", tag, "echo_reactor.wasm", "20261129.1", "strict", "artifact-refused"},
		{"wrong version", tag, "echo_reactor.wasm", "20261129.2", "", "artifact-integrity-failed"},
		{"missing module", tag, "nope.wasm", "20261129.1", "", "artifact-unavailable"},
		{"unknown tag", host + "/acme/echo:9.9.9", "echo_reactor.wasm", "20261129.1", "", "artifact-unavailable"},
	} {
		extra := map[string]any{}
		if c.posture != "" {
			extra["sandbox"] = c.posture
		}
		env := run(ociManifest(t, c.ref, c.path, c.version, extra), runCache)
		if env["kind"] != "error" || env["code"] != c.code {
			t.Errorf("%s: got %v, want code %s", c.name, env, c.code)
		}
	}

	// Strict with a pinned ref, from the pulled cache, with the registry down.
	reg.Stop()
	env = run(ociManifest(t, pinned, "echo_reactor.wasm", "20261129.1", map[string]any{"sandbox": "strict"}), pullCache)
	if env["kind"] != "result" {
		t.Fatalf("pinned run from the cache with the registry down: %v", env)
	}
	code, _, stderr = runCLI(t, "", "pull", tag, "--insecure-registry", host, "--artifact-cache-dir", t.TempDir()+"/c", "--timeout", "20s")
	if code != 1 || !strings.Contains(stderr, "artifact-unavailable") {
		t.Fatalf("pull with the registry down: exit %d, %s", code, stderr)
	}
}

// TestOCILayoutPushRun pushes to an OCI image layout directory (the
// air-gapped path) and runs from it by tag and by digest.
func TestOCILayoutPushRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	fixture := filepath.Join("..", "..", "testdata", "wasm", "echo_reactor.wasm")
	cache := t.TempDir() + "/c"
	code, stdout, stderr := runCLI(t, "", "push", fixture+"=handlers/echo.wasm", "oci-layout:"+dir+":v1", "--artifact-version", "7", "--artifact-cache-dir", cache)
	if code != 0 {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	pinned := strings.TrimSpace(stdout)
	if !strings.HasPrefix(pinned, "oci-layout:"+dir+"@sha256:") {
		t.Fatalf("push printed %q", pinned)
	}
	for _, p := range []string{"oci-layout", "index.json"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	in := writeInput(t, `{"x":1}`)
	for _, ref := range []string{"oci-layout:" + dir + ":v1", pinned} {
		_, stdout, _ := runCLI(t, "", "run", "--manifest", ociManifest(t, ref, "handlers/echo.wasm", "7", nil), "--input", in, "--artifact-cache-dir", cache)
		if env := envelope(t, stdout); env["kind"] != "result" {
			t.Fatalf("%s: %v", ref, env)
		}
	}
	// A relative layout directory is anchored at the manifest's directory.
	rel := ociManifest(t, "oci-layout:layout:v1", "handlers/echo.wasm", "7", nil)
	relManifest := filepath.Join(filepath.Dir(dir), "tool.json")
	if b, err := os.ReadFile(rel); err != nil || os.WriteFile(relManifest, b, 0o600) != nil {
		t.Fatal(err)
	}
	_, stdout, _ = runCLI(t, "", "run", "--manifest", relManifest, "--input", in, "--artifact-cache-dir", cache)
	if env := envelope(t, stdout); env["kind"] != "result" {
		t.Fatalf("relative oci-layout ref: %v", env)
	}
	code, stdout, _ = runCLI(t, "", "inspect", "--json", pinned)
	if code != 0 || !strings.Contains(stdout, `"title": "handlers/echo.wasm"`) {
		t.Fatalf("inspect --json: exit %d\n%s", code, stdout)
	}
}

func TestOCIUsageErrors(t *testing.T) {
	fixture := filepath.Join("..", "..", "testdata", "wasm", "echo_reactor.wasm")
	for _, args := range [][]string{
		{"push", fixture, "oci-layout:" + t.TempDir()},                   // no --artifact-version
		{"push", "oci-layout:" + t.TempDir(), "--artifact-version", "1"}, // no module
		{"push", "/does/not/exist.wasm", "oci-layout:" + t.TempDir(), "--artifact-version", "1"},
		{"pull"},
		{"inspect", "a", "b"},
		{"pull", "x/y:z", "--insecure-registry", "10.0.0.1:5000"}, // plain HTTP only to loopback
	} {
		if code, _, stderr := runCLI(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := fs.String("artifact-version", "", "")
	pos, err := parseInterspersed(fs, []string{"a.wasm", "--artifact-version", "3", "b.wasm=t/b.wasm", "ref", "--", "--odd"})
	if err != nil || *v != "3" || strings.Join(pos, " ") != "a.wasm b.wasm=t/b.wasm ref --odd" {
		t.Fatalf("pos %q, version %q, err %v", pos, *v, err)
	}
}

func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, on: true, start: time.Now(), done: map[string]int64{}, total: map[string]int64{}}
	p.update(artifact.Progress{Digest: "sha256:a", Done: 512, Total: 2048})
	p.update(artifact.Progress{Digest: "sha256:a", Done: 2048, Total: 2048})
	p.finish()
	if out := b.String(); !strings.Contains(out, "2.0 KiB / 2.0 KiB") || !strings.HasSuffix(out, "\n") {
		t.Fatalf("progress output %q", out)
	}
	b.Reset()
	q := newProgress(&b, &b) // not a terminal: silent
	q.update(artifact.Progress{Digest: "sha256:a", Done: 1, Total: 1})
	q.finish()
	if b.Len() != 0 {
		t.Fatalf("progress drawn on a non-terminal: %q", b.String())
	}
}

// TestIsTerminal: progress is drawn on a terminal, not on /dev/null (a
// character device too: 2>/dev/null used to turn the meter on, and its
// upload wrapper kept push from sending files with sendfile).
func TestIsTerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("/dev/null is taken for a terminal")
	}
	if !isTerminal(openPTY(t)) {
		t.Error("a pseudo-terminal is not taken for a terminal")
	}
}
