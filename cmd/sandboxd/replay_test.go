package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// writeFixtureManifest writes a manifest for fixture name into dir and
// returns its path.
func writeFixtureManifest(t *testing.T, dir, name string, extra map[string]any) string {
	t.Helper()
	m := map[string]any{
		"id": "test." + strings.ReplaceAll(name, "_", "-"), "description": "fixture " + name, "version": "1.0.0",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": sandboxtest.FixturePath(t, name)},
		"limits":          map[string]any{"memMB": 64, "cpuMs": 5000},
	}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	p := filepath.Join(dir, name+".json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runReplay(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, "", append([]string{"replay", "--cache-dir", sandboxtest.CacheDir(t)}, args...)...)
}

// run --record writes a 0600 recording that replay calls identical (exit
// 0); another input diverges (exit 1) at the host call; a cut, corrupt or
// truncated file is unusable (exit 2); --module replays under another
// module.
func TestRunRecordReplay(t *testing.T) {
	dir := t.TempDir()
	mpath := writeFixtureManifest(t, dir, "replay_clock_random", nil)
	rec := filepath.Join(dir, "call.rec.jsonl")
	code, out, errs := runCLI(t, "{}", "run", "--manifest", mpath, "--input", "-", "--record", rec)
	if code != 0 {
		t.Fatalf("run: %d %s %s", code, out, errs)
	}
	st, err := os.Stat(rec)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("recording: %v %v", st, err)
	}
	code, out, errs = runReplay(t, rec)
	if code != 0 || out != "identical\n" {
		t.Fatalf("replay: %d %q %s", code, out, errs)
	}
	b, _ := os.ReadFile(rec)

	edited := filepath.Join(dir, "edited.jsonl")
	os.WriteFile(edited, bytes.Replace(b, []byte(`"input":{}`), []byte(`"input":{"a":1}`), 1), 0o600)
	code, out, _ = runReplay(t, edited)
	if code != 1 || out != "diverged: host call #2 (random_get #1): the guest asked random_get(4 bytes), recorded random_get(8 bytes)\n" {
		t.Fatalf("edited input: %d %q", code, out)
	}

	code, out, errs = runReplay(t, rec, "--module", sandboxtest.FixturePath(t, "echo_reactor"))
	if code != 1 || !strings.HasPrefix(out, "diverged: ") || !strings.Contains(errs, "note: module digest") {
		t.Fatalf("--module: %d %q %s", code, out, errs)
	}

	lines := bytes.SplitAfter(b, []byte("\n"))
	for name, bad := range map[string][]byte{
		"cut":     b[:len(b)/2],
		"corrupt": append(append([]byte(nil), lines[0]...), []byte("{\"kind\":\"call\",\"n\":1,\"fn\":\"teleport\"}\n")...),
	} {
		p := filepath.Join(dir, name+".jsonl")
		os.WriteFile(p, bad, 0o600)
		code, out, errs = runReplay(t, p)
		if code != 2 || out != "" || !strings.Contains(errs, "is unusable") {
			t.Fatalf("%s: %d %q %s", name, code, out, errs)
		}
	}

	trunc := filepath.Join(dir, "trunc.jsonl")
	code, _, errs = runCLI(t, "{}", "run", "--manifest", mpath, "--input", "-", "--record", trunc, "--record-max-bytes", "80")
	if code != 0 || !strings.Contains(errs, "was truncated") {
		t.Fatalf("truncated run: %d %s", code, errs)
	}
	code, _, errs = runReplay(t, trunc)
	if code != 2 || !strings.Contains(errs, "truncated at host call #") {
		t.Fatalf("truncated replay: %d %s", code, errs)
	}

	if code, _, errs = runReplay(t); code != 2 || !strings.Contains(errs, "want one recording FILE") {
		t.Fatalf("no file: %d %s", code, errs)
	}
}

// The transcript through the CLI: a Go guest with two loopback
// exchanges, a secret substituted into a header and reflected; replay after
// the upstream stopped is identical; the secret is nowhere in the file.
func TestRunRecordReplayHTTP(t *testing.T) {
	const secret = "cli-s3cret-value"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first":
			fmt.Fprint(w, `{"next":"/second"}`)
		default:
			b, _ := json.Marshal(map[string]string{"key": r.Header.Get("X-Key")})
			w.Write(b)
		}
	}))
	dir := t.TempDir()
	host := strings.TrimPrefix(srv.URL, "http://")
	mpath := writeFixtureManifest(t, dir, "replay_reactor", map[string]any{
		"network":   map[string]any{"kind": "allowlist", "hosts": []string{host}},
		"needsSpec": map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"type": "string"}}},
	})
	secrets := filepath.Join(dir, "secrets.json")
	os.WriteFile(secrets, []byte(`{"API_KEY":"`+secret+`"}`), 0o600)
	rec := filepath.Join(dir, "http.rec.jsonl")
	input := `{"url":"` + srv.URL + `/first","headers":{"X-Key":"{{secret:API_KEY}}"}}`
	code, out, errs := runCLI(t, input, "run", "--manifest", mpath, "--input", "-", "--record", rec,
		"--egress-allow-cidr", "127.0.0.0/8", "--secrets-file", secrets)
	if code != 0 || !strings.Contains(out, "REDACTED:API_KEY") {
		t.Fatalf("run: %d %s %s", code, out, errs)
	}
	srv.Close()
	b, _ := os.ReadFile(rec)
	if bytes.Contains(b, []byte(secret)) {
		t.Fatalf("the secret is in the recording:\n%s", b)
	}
	code, out, errs = runReplay(t, rec)
	if code != 0 || out != "identical\n" {
		t.Fatalf("offline replay: %d %q %s", code, out, errs)
	}
	t.Logf("replay: %s%s", out, errs)
}

// conformance --cassettes: a recording made with run --record is a case of
// its tool, replayed offline; an edited one fails with its divergence; an
// unusable one and one of a tool not in the pack fail too.
func TestConformanceCassettes(t *testing.T) {
	packDir, cas := t.TempDir(), t.TempDir()
	wasm, err := os.ReadFile(sandboxtest.FixturePath(t, "replay_clock_random"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(packDir, "handler.wasm"), wasm, 0o644)
	m := `{"id":"acme.clock","description":"clock and random","version":"1.0.0","input":{"type":"object"},"output":{"type":"object"},` +
		`"codeArtifactRef":{"kind":"filesystem","modulePath":"handler.wasm"},"limits":{"memMB":16,"cpuMs":1000}}`
	os.WriteFile(filepath.Join(packDir, "tool.json"), []byte(m), 0o644)
	rec := filepath.Join(cas, "a.rec.jsonl")
	if code, out, errs := runCLI(t, "{}", "run", "--manifest", filepath.Join(packDir, "tool.json"), "--input", "-", "--record", rec); code != 0 {
		t.Fatalf("run: %d %s %s", code, out, errs)
	}
	conf := func() (int, string) {
		code, out, errs := runCLI(t, "", "conformance", packDir, "--cassettes", cas, "--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"))
		if code == exitUsage {
			t.Fatalf("conformance: usage %s", errs)
		}
		return code, out
	}
	code, out := conf()
	if code != exitOK || !strings.Contains(out, "a.rec.jsonl replays identically offline (2 host calls, outcome result, fuel ") {
		t.Fatalf("conformance: %d\n%s", code, out)
	}

	b, _ := os.ReadFile(rec)
	os.WriteFile(filepath.Join(cas, "b.rec.jsonl"), bytes.Replace(b, []byte(`"input":{}`), []byte(`"input":{"a":1}`), 1), 0o600)
	os.WriteFile(filepath.Join(cas, "c.rec.jsonl"), b[:len(b)/2], 0o600)
	os.WriteFile(filepath.Join(cas, "d.rec.jsonl"), bytes.Replace(b, []byte(`"toolId":"acme.clock"`), []byte(`"toolId":"acme.gone"`), 1), 0o600)
	code, out = conf()
	for _, want := range []string{
		"b.rec.jsonl diverged: host call #2 (random_get #1): the guest asked random_get(4 bytes), recorded random_get(8 bytes)",
		"c.rec.jsonl is unusable",
		`d.rec.jsonl is a recording of tool "acme.gone", which is not in the pack`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if code != exitError {
		t.Fatalf("exit %d", code)
	}
}
