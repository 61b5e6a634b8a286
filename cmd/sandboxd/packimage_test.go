package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/deployenv"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// The pack images of these tests are built with the real clients: ORAS
// (a file-layer artifact: `oras push REF index.json tools/… guardrails/…`)
// and crane (`crane append -f pack.tar`: a container image whose tar
// layer holds /app/index.json and /app/dist/, Kindgi's image shape), and
// served by a real docker-registry on loopback. The modules are the
// repository's WAT examples (identity, allow), so no Go guest is compiled.

// packRegistry is a docker-registry with the clients that push to it.
type packRegistry struct {
	t     *testing.T
	reg   *registrytest.Registry
	host  string
	oras  string
	crane string
	home  string // an empty docker config: never the host's credentials
}

func newPackRegistry(t *testing.T) *packRegistry {
	t.Helper()
	oras, crane := ociClient(t, "oras"), ociClient(t, "crane")
	reg := registrytest.Start(t)
	home := t.TempDir()
	return &packRegistry{t: t, reg: reg, host: reg.Host, oras: oras, crane: crane, home: home}
}

func (r *packRegistry) run(dir, bin string, args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+r.home, "DOCKER_CONFIG="+r.home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

var digestRe = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// orasPush pushes the files of dir (paths relative to it) as titled
// layers to repo:tag and returns the manifest digest.
func (r *packRegistry) orasPush(dir, repoTag string, files ...string) string {
	r.t.Helper()
	out := r.run(dir, r.oras, append([]string{"push", "--plain-http", "--no-tty", r.host + "/" + repoTag}, files...)...)
	d := digestRe.FindString(out[strings.LastIndex(out, "Digest:"):])
	if d == "" {
		r.t.Fatalf("oras push printed no digest:\n%s", out)
	}
	return d
}

// craneAppend appends the tar file to an empty base as repo:tag and
// returns the manifest digest.
func (r *packRegistry) craneAppend(tarFile, repoTag string) string {
	r.t.Helper()
	r.run(filepath.Dir(tarFile), r.crane, "append", "--insecure", "-f", tarFile, "-t", r.host+"/"+repoTag)
	return strings.TrimSpace(r.run("", r.crane, "digest", "--insecure", r.host+"/"+repoTag))
}

// packIndex is an index of the WAT identity tool and the allow check,
// their modulePaths as Kindgi's indexer records them (source paths) when
// sources is set, else the .wasm paths.
func packIndex(t *testing.T, artifactVersion string, sources bool, toolSandbox string) []byte {
	t.Helper()
	tool, check := "tools/identity.wasm", "guardrails/allow.wasm"
	if sources {
		tool, check = "tools/identity/index.ts", "guardrails/allow/index.ts"
	}
	ix := map[string]any{
		"v": 1, "packId": "acme", "packVersion": "1.0.0", "artifactVersion": artifactVersion, "publishedAt": "2026-12-01T00:00:00.000Z",
		"tools": []any{map[string]any{
			"id": "acme.identity", "description": "Returns its input unchanged.",
			"input":  map[string]any{"type": "object", "properties": map[string]any{"value": map[string]any{}}, "required": []string{"value"}, "additionalProperties": false},
			"output": map[string]any{"type": "object", "required": []string{"value"}},
			"limits": map[string]any{"memMB": 16, "cpuMs": 500}, "sandbox": toolSandbox, "modulePath": tool,
		}},
		"guardrails": []any{map[string]any{
			"id": "acme.allow", "kind": "zero-llm", "action": map[string]any{"on-violation": "halt"},
			"checkId": "acme.checks.allow", "checkModulePath": check, "limits": map[string]any{"memMB": 16, "cpuMs": 500},
		}},
		"agents": []any{}, "flows": []any{},
	}
	if toolSandbox == "" {
		delete(ix["tools"].([]any)[0].(map[string]any), "sandbox")
	}
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func exampleModule(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "pack", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const identityCases = `{"tool":"acme.identity","cases":[{"name":"returns its input","input":{"value":"hi"},"expect":{"output":{"value":"hi"}}}]}`
const allowCases = `{"check":"acme.checks.allow","cases":[{"name":"passes","config":{},"trace":{"runId":"r1","tenantId":"t1","output":"x","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"},"expect":{"output":{"passed":true,"reason":"allowed"}}}]}`

// filesPack writes a file-layer pack (layout a) to a directory and pushes
// it with ORAS; it returns the manifest digest.
func (r *packRegistry) filesPack(repoTag, artifactVersion, toolSandbox string) string {
	r.t.Helper()
	dir := r.t.TempDir()
	files := map[string][]byte{
		"index.json":                packIndex(r.t, artifactVersion, false, toolSandbox),
		"tools/identity.wasm":       exampleModule(r.t, "identity.wasm"),
		"guardrails/allow.wasm":     exampleModule(r.t, "allow.wasm"),
		"cases/identity.cases.json": []byte(identityCases),
		"cases/allow.cases.json":    []byte(allowCases),
	}
	var names []string
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			r.t.Fatal(err)
		}
		names = append(names, name)
	}
	return r.orasPush(dir, repoTag, names...)
}

// tarPack writes a tar of entries (name → content; a "->target" content
// is a symbolic link) and appends it with crane; it returns the digest.
func (r *packRegistry) tarPack(repoTag string, entries [][2]string) string {
	r.t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e[1])), ModTime: time.Unix(0, 0)}
		if target, ok := strings.CutPrefix(e[1], "->"); ok {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, target, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			r.t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e[1]))
		}
	}
	tw.Close()
	f := filepath.Join(r.t.TempDir(), "pack.tar")
	if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return r.craneAppend(f, repoTag)
}

// kindgiEntries is Kindgi's image shape: /app/index.json with source
// modulePaths, /app/dist/ with the modules and dist/bundle-map.json.
func kindgiEntries(t *testing.T, artifactVersion string) [][2]string {
	return [][2]string{
		{"app/index.json", string(packIndex(t, artifactVersion, true, ""))},
		{"app/dist/bundle-map.json", `{"tools/identity/index.ts":"tools/identity/index.mjs","guardrails/allow/index.ts":"guardrails/allow.wasm"}`},
		{"app/dist/tools/identity/index.wasm", string(exampleModule(t, "identity.wasm"))},
		{"app/dist/guardrails/allow.wasm", string(exampleModule(t, "allow.wasm"))},
		{"app/cases/identity.cases.json", identityCases},
		{"app/cases/allow.cases.json", allowCases},
	}
}

// writeEntries writes entries (under app/) to a directory and returns its
// app directory.
func writeEntries(t *testing.T, entries [][2]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e[0]))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(e[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "app")
}

func (r *packRegistry) serveArgs(ref, cache string, extra ...string) []string {
	return append([]string{"--index", "oci://" + ref, "--insecure-registry", r.host,
		"--artifact-cache-dir", cache, "--cache-dir", sandboxtest.CacheDir(r.t)}, extra...)
}

// packPost sends one pack protocol request to a served process.
func packPost(t *testing.T, base, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("kindgi-pack-token", "tok-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func packInfo(t *testing.T, base string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/info", nil)
	req.Header.Set("kindgi-pack-token", "tok-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return m
}

const (
	toolCall  = `{"v":2,"kind":"invoke","tool":{"id":"acme.identity"},"input":{"value":"hi"},"ctx":{"tenantId":"t1","runId":"r1"}}`
	checkCall = `{"v":2,"kind":"check-invoke","check":{"id":"acme.checks.allow"},"config":{},"trace":{"runId":"r1","tenantId":"t1","output":"x","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"}}`
)

// TestServePackImage: serve --index oci://REF boots from an ORAS
// file-layer artifact and from a crane-appended Kindgi-shaped image (module
// root /app/dist found by the rule, dist/bundle-map.json mapping the
// source modulePaths) and answers a tool call and a check-invoke.
func TestServePackImage(t *testing.T) {
	r := newPackRegistry(t)
	filesDigest := r.filesPack("acme/files:1", "20261201.1", "")
	tarDigest := r.tarPack("acme/kindgi:1", kindgiEntries(t, "20261201.1"))
	app := writeEntries(t, kindgiEntries(t, "20261201.1"))
	dirDigest := r.orasPush(app, "acme/dir:1", "index.json", "dist") // dist/ is one tar layer
	for _, c := range []struct{ name, ref, digest, layout string }{
		{"oras file layers", r.host + "/acme/files:1", filesDigest, "files"},
		{"oras index.json and a dist/ directory layer", r.host + "/acme/dir:1", dirDigest, "files"},
		{"crane tar layer under /app", r.host + "/acme/kindgi:1", tarDigest, "tar"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startServe(t, r.serveArgs(c.ref, filepath.Join(t.TempDir(), "oci"))...)
			ev := p.waitEvent("artifact-pack", nil)
			if ev["digest"] != c.digest || ev["layout"] != c.layout {
				t.Fatalf("artifact-pack event %v, want digest %s layout %s", ev, c.digest, c.layout)
			}
			ev = p.waitEvent("listening", nil)
			base := fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
			status, body := packPost(t, base, toolCall)
			t.Logf("POST /v1/invoke %s\n→ %d %s", toolCall, status, body)
			if status != 200 || body != `{"v":2,"kind":"result","output":{"value":"hi"}}` {
				t.Fatalf("invoke: %d %s", status, body)
			}
			status, body = packPost(t, base, checkCall)
			t.Logf("POST /v1/invoke %s\n→ %d %s", checkCall, status, body)
			if status != 200 || body != `{"v":2,"kind":"check-result","result":{"passed":true,"reason":"allowed"}}` {
				t.Fatalf("check-invoke: %d %s", status, body)
			}
			if info := packInfo(t, base); info["artifactVersion"] != "20261201.1" || fmt.Sprint(info["checks"]) != "[acme.checks.allow]" {
				t.Fatalf("/v1/info %v", info)
			}
		})
	}
}

// TestServePackImageReload: SIGHUP re-resolves the image's tag at once: an
// image re-tagged to a new index is served after the reload; and a
// digest-pinned image boots again from the cache with the registry down.
func TestServePackImageReload(t *testing.T) {
	r := newPackRegistry(t)
	first := r.tarPack("acme/live:1", kindgiEntries(t, "20261201.1"))
	cache := filepath.Join(t.TempDir(), "oci")
	p := startServe(t, r.serveArgs(r.host+"/acme/live:1", cache)...)
	ev := p.waitEvent("listening", nil)
	base := fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
	moved := r.tarPack("acme/live:1", kindgiEntries(t, "20261201.2"))
	if moved == first {
		t.Fatal("the re-tagged image has the same digest")
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitEvent("artifact-pack", map[string]string{"digest": moved})
	p.waitEvent("reloaded", nil)
	if v := packInfo(t, base)["artifactVersion"]; v != "20261201.2" {
		t.Fatalf("after the reload /v1/info says artifactVersion %v, want 20261201.2", v)
	}
	t.Logf("re-tagged %s -> %s: served after SIGHUP", first[:19], moved[:19])

	// Offline: the pinned image boots from the cache; the tag cannot.
	r.reg.Stop()
	pinned := r.host + "/acme/live@" + moved
	p2 := startServe(t, r.serveArgs(pinned, cache)...)
	ev = p2.waitEvent("listening", nil)
	base = fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
	if status, body := packPost(t, base, toolCall); status != 200 {
		t.Fatalf("offline invoke: %d %s", status, body)
	}
	t.Setenv(tokenEnv, "tok")
	code, _, stderr := runCLI(t, "", append([]string{"serve"}, r.serveArgs(r.host+"/acme/live:1", cache, "--addr", "127.0.0.1:0", "--registry-timeout", "5s")...)...)
	if evs := processEvents(t, stderr, "boot-failed"); code != exitError || len(evs) != 1 || !strings.Contains(fmt.Sprint(evs[0]["problems"]), "artifact-unavailable") {
		t.Fatalf("a tag with the registry down: exit %d\n%s", code, stderr)
	}
}

// TestServePackImageRefused: hostile and broken images refuse to boot,
// each with its code: a tar entry ../x, a symbolic link as a module, no
// index.json, a tampered layer blob, a strict tool in an image named by
// tag (the same image by digest boots).
func TestServePackImageRefused(t *testing.T) {
	r := newPackRegistry(t)
	good := kindgiEntries(t, "20261201.1")
	strictIndex := string(packIndex(t, "20261201.1", true, "strict"))
	tampered := r.tarPack("acme/tampered:1", good)
	for _, c := range []struct {
		name    string
		entries [][2]string
		code    string
		msg     string
	}{
		{"a ../ entry", append([][2]string{{"../x", "x"}}, good...), "artifact-refused", `has an entry named \"../x\", which leaves the image root`},
		{"a symlink module", append(good[:2:2], [2]string{"app/dist/tools/identity/index.wasm", "->/etc/passwd"}, good[3]), "artifact-refused", "is a symbolic link"},
		{"no index.json", good[1:], "artifact-unavailable", "carries no pack index: it has no /app/index.json"},
		{"a strict tool by tag", append([][2]string{{"app/index.json", strictIndex}}, good[1:]...), "artifact-refused", "strict tool acme.identity comes from the pack image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := "acme/" + strings.ReplaceAll(strings.Trim(strings.NewReplacer(".", "", "/", "").Replace(c.name), " "), " ", "-")
			digest := r.tarPack(repo+":1", c.entries)
			t.Setenv(tokenEnv, "tok")
			code, _, stderr := runCLI(t, "", append([]string{"serve"}, r.serveArgs(r.host+"/"+repo+":1", filepath.Join(t.TempDir(), "oci"), "--addr", "127.0.0.1:0")...)...)
			evs := processEvents(t, stderr, "boot-failed")
			b, _ := json.Marshal(evs)
			if code != exitError || len(evs) != 1 || !strings.Contains(string(b), `"code":"`+c.code+`"`) || !strings.Contains(string(b), c.msg) {
				t.Fatalf("exit %d, want boot-failed %s %q:\n%s", code, c.code, c.msg, stderr)
			}
			t.Logf("%s", b)
			if c.name == "a strict tool by tag" {
				p := startServe(t, r.serveArgs(r.host+"/"+repo+"@"+digest, filepath.Join(t.TempDir(), "oci"))...)
				p.waitEvent("listening", nil)
			}
		})
	}
	t.Run("a tampered blob", func(t *testing.T) {
		// The registry behind a proxy that flips a byte of the layer.
		out := r.run("", r.crane, "manifest", "--insecure", r.host+"/acme/tampered@"+tampered)
		var m struct{ Layers []struct{ Digest string } }
		if err := json.Unmarshal([]byte(out), &m); err != nil || len(m.Layers) != 1 {
			t.Fatalf("manifest: %v %s", err, out)
		}
		f := &registrytest.Faults{}
		f.Tamper(m.Layers[0].Digest)
		proxy := registrytest.Host(registrytest.NewProxy(t, r.host, f))
		t.Setenv(tokenEnv, "tok")
		code, _, stderr := runCLI(t, "", "serve", "--index", "oci://"+proxy+"/acme/tampered:1", "--insecure-registry", proxy,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0")
		evs := processEvents(t, stderr, "boot-failed")
		b, _ := json.Marshal(evs)
		if code != exitError || !strings.Contains(string(b), `"code":"artifact-integrity-failed"`) {
			t.Fatalf("exit %d, want boot-failed artifact-integrity-failed:\n%s", code, stderr)
		}
		t.Logf("%s", b)
	})
}

// TestServePackImageEnvelope: --envelope with an oci index checks the
// envelope's imageDigest against the digest the boot resolved: the signed
// image boots; after the tag moved to another image, the boot is refused
// (image-unverifiable).
func TestServePackImageEnvelope(t *testing.T) {
	r := newPackRegistry(t)
	entries := kindgiEntries(t, "20261201.1")
	digest := r.tarPack("acme/signed:1", entries)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	keys := filepath.Join(dir, "trusted-keys.json")
	_ = os.WriteFile(keys, []byte(`{"keys":[{"keyId":"acme-ci","publicKey":"`+base64.StdEncoding.EncodeToString(pub)+`"}]}`), 0o644)
	sum := sha256.Sum256([]byte(entries[0][1]))
	sign := func(repo string) string {
		e := deployenv.Envelope{Schema: deployenv.Schema, ImageRef: r.host + "/" + repo + "@" + digest, ImageDigest: digest,
			ArtifactVersion: "20261201.1", Index: json.RawMessage(`{}`), IndexHash: "sha256:" + hex.EncodeToString(sum[:]),
			TenantID: "t1", PublishedAt: "2026-12-01T00:00:00.000Z", SignerKeyID: "acme-ci",
			SignerPublicKey: base64.StdEncoding.EncodeToString(pub)}
		e.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, deployenv.SignedBody(e.ArtifactVersion, e.ImageDigest, e.IndexHash, e.PublishedAt, e.TenantID)))
		b, _ := json.Marshal(e)
		f := filepath.Join(t.TempDir(), "deploy-envelope.json")
		_ = os.WriteFile(f, b, 0o644)
		return f
	}
	env := sign("acme/signed")
	args := func(env string) []string {
		return r.serveArgs(r.host+"/acme/signed:1", filepath.Join(t.TempDir(), "oci"), "--envelope", env, "--trusted-keys", keys)
	}
	p := startServe(t, args(env)...)
	p.waitEvent("listening", nil)

	// An envelope for the same digest in another repository.
	t.Setenv(tokenEnv, "tok")
	code, _, stderr := runCLI(t, "", append([]string{"serve"}, append(args(sign("acme/elsewhere")), "--addr", "127.0.0.1:0")...)...)
	if evs := processEvents(t, stderr, "boot-failed"); code != exitError || len(evs) != 1 || !strings.Contains(fmt.Sprint(evs[0]["problems"]), "is not the repository served") {
		t.Fatalf("another repository: exit %d\n%s", code, stderr)
	}

	r.tarPack("acme/signed:1", kindgiEntries(t, "20261201.2")) // re-tagged
	t.Setenv(tokenEnv, "tok")                                  // serve takes it out of the environment
	code, _, stderr = runCLI(t, "", append([]string{"serve"}, append(args(env), "--addr", "127.0.0.1:0")...)...)
	evs := processEvents(t, stderr, "boot-failed")
	if code != exitError || len(evs) != 1 || !strings.Contains(fmt.Sprint(evs[0]["problems"]), "code:image-unverifiable") {
		t.Fatalf("re-tagged image: exit %d\n%s", code, stderr)
	}
	t.Logf("re-tagged: %v", evs[0]["problems"])
}

// TestConformancePackImage: conformance --index oci://REF checks the
// index pack of an image — tools and guardrail checks, static checks and
// the cases the image carries — for both layouts.
func TestConformancePackImage(t *testing.T) {
	r := newPackRegistry(t)
	r.filesPack("acme/files:1", "20261201.1", "")
	r.tarPack("acme/kindgi:1", kindgiEntries(t, "20261201.1"))
	for _, ref := range []string{r.host + "/acme/files:1", r.host + "/acme/kindgi:1"} {
		code, stdout, stderr := runCLI(t, "", "conformance", "--index", "oci://"+ref, "--insecure-registry", r.host,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--color", "never")
		t.Logf("sandboxd conformance --index oci://%s\n%s", ref, stdout)
		if code != exitOK || !strings.Contains(stdout, "PASSED: ") || strings.Contains(stdout, "FAIL") {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, want := range []string{"pack               image", "acme.identity      case returns its input", "acme.checks.allow  case passes"} {
			if !strings.Contains(stdout, want) {
				t.Fatalf("the summary lacks %q", want)
			}
		}
	}
}

// TestMCPPackImage: sandboxd mcp --index oci://REF serves the image's
// tools over stdio (checks are not MCP tools).
func TestMCPPackImage(t *testing.T) {
	r := newPackRegistry(t)
	r.tarPack("acme/kindgi:1", kindgiEntries(t, "20261201.1"))
	cmd := exec.Command(sandboxdBinary(t), "mcp", "--index", "oci://"+r.host+"/acme/kindgi:1", "--insecure-registry", r.host,
		"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t))
	var stderr sandboxtest.Buffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	w := func(s string) { _, _ = io.WriteString(stdin, s+"\n") }
	w(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	w(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"acme.identity","arguments":{"value":"mcp"}}}`)
	dec := json.NewDecoder(stdout)
	var answers []json.RawMessage
	for len(answers) < 2 {
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("stdout: %v; stderr %s", err, stderr.String())
		}
		answers = append(answers, m)
	}
	t.Logf("tools/call through the image: %s", answers[1])
	if !strings.Contains(string(answers[1]), `"structuredContent":{"value":"mcp"}`) {
		t.Fatalf("tools/call answer %s; stderr %s", answers[1], stderr.String())
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v; stderr %s", err, stderr.String())
	}
}

// TestPushPack: sandboxd push-pack pushes a Kindgi-shaped pack directory
// (index.json with source modulePaths, dist/ with the modules and the
// bundle map) as a file-layer artifact that serve --index oci://REF serves
// with no other flag; a pack with a missing module is not pushed.
func TestPushPack(t *testing.T) {
	r := newPackRegistry(t)
	app := writeEntries(t, kindgiEntries(t, "20261201.1"))
	push := func(ref string) (int, string, string) {
		return runCLI(t, "", "push-pack", "--index", filepath.Join(app, "index.json"), "--module-root", filepath.Join(app, "dist"),
			"--bundle-map", filepath.Join(app, "dist", "bundle-map.json"), ref, "--insecure-registry", r.host,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"))
	}
	code, stdout, stderr := push(r.host + "/acme/pushed:1")
	ref := strings.TrimSpace(stdout)
	if code != exitOK || !strings.HasPrefix(ref, r.host+"/acme/pushed@sha256:") {
		t.Fatalf("push-pack: exit %d %s %s", code, stdout, stderr)
	}
	p := startServe(t, r.serveArgs(ref, filepath.Join(t.TempDir(), "oci"))...)
	ev := p.waitEvent("listening", nil)
	base := fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
	if status, body := packPost(t, base, checkCall); status != 200 || !strings.Contains(body, `"passed":true`) {
		t.Fatalf("check-invoke: %d %s", status, body)
	}
	if status, body := packPost(t, base, toolCall); status != 200 || !strings.Contains(body, `"value":"hi"`) {
		t.Fatalf("invoke: %d %s", status, body)
	}

	_ = os.Remove(filepath.Join(app, "dist", "guardrails", "allow.wasm"))
	code, _, stderr = push(r.host + "/acme/pushed:2")
	if code != exitError || !strings.Contains(stderr, "acme.checks.allow: module not loadable") {
		t.Fatalf("a missing module: exit %d %s", code, stderr)
	}
}

// TestConformanceIndexPackImage: conformance/testdata/index-pack (tools,
// guardrail checks — one of them strict — a bundle map and case files) in
// a crane-appended image under /app: by tag, the strict check is refused
// (it must be pinned by digest); by digest, the report is the directory's
// (TestIndexPack: the one failure is acme.no-verdict's output) plus the
// pack image check.
func TestConformanceIndexPackImage(t *testing.T) {
	sandboxtest.SkipShort(t, "checks_reactor", 2<<20)
	r := newPackRegistry(t)
	dir := packIndexDir(t)
	var entries [][2]string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		entries = append(entries, [2]string{"app/" + filepath.ToSlash(rel), string(b)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	digest := r.tarPack("acme/index-pack:1", entries)
	conf := func(ref string) (int, string) {
		code, stdout, stderr := runCLI(t, "", "conformance", "--index", "oci://"+ref, "--insecure-registry", r.host,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t), "--color", "never")
		if code == exitUsage {
			t.Fatalf("conformance %s: %s", ref, stderr)
		}
		return code, stdout
	}
	code, out := conf(r.host + "/acme/index-pack:1")
	if code != exitError || !regexp.MustCompile(`FAIL +acme.checks.min-length +manifest +.*strict check acme.checks.min-length comes from the pack image .*pinned by digest`).MatchString(out) {
		t.Fatalf("by tag: exit %d\n%s", code, out)
	}
	code, out = conf(r.host + "/acme/index-pack@" + digest)
	t.Logf("sandboxd conformance --index oci://%s/acme/index-pack@%s\n%s", r.host, digest, out)
	if code != exitError || !strings.Contains(out, "FAILED: 41 checks, 38 passed, 1 failed, 0 warnings, 2 skipped") ||
		!regexp.MustCompile(`FAIL +acme.no-verdict +probe output-schema`).MatchString(out) {
		t.Fatalf("by digest: exit %d\n%s", code, out)
	}
}

// TestServePackImageBootBounded: a boot from a pack image whose registry
// hangs on a layer is bounded by the per-request deadline (boot-failed
// naming the step) and stopped by SIGTERM (exit 0, stopped during boot).
func TestServePackImageBootBounded(t *testing.T) {
	s := newStandIn(t)
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(t.TempDir()).WithInsecureRegistries(s.target).WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	art, err := o.PushPack(ctx, s.target+"/acme/pack:1", "1", []artifact.PackFile{
		{Title: "index.json", Data: packIndex(t, "20261201.1", false, "")},
		{Title: "tools/identity.wasm", Data: exampleModule(t, "identity.wasm")},
		{Title: "guardrails/allow.wasm", Data: exampleModule(t, "allow.wasm")},
	})
	if err != nil {
		t.Fatal(err)
	}
	layer := art.Layers[1]
	args := func(extra ...string) []string {
		return append([]string{"--index", "oci://" + s.host + "/acme/pack@" + art.Digest, "--insecure-registry", s.host,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t)}, extra...)
	}
	s.setHang("/blobs/"+layer.Digest, int(layer.Size))
	defer s.setHang("", 0)
	p := startServe(t, args("--registry-timeout", "2s")...)
	ev := p.waitEvent("boot-failed", nil)
	b, _ := json.Marshal(ev["problems"])
	if !strings.Contains(string(b), "deadline-exceeded") || !strings.Contains(string(b), "GET blob "+layer.Digest) {
		t.Fatalf("boot-failed does not name the step: %s", b)
	}
	t.Logf("hung layer: %s", b)
	if code := p.wait(10 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}

	p = startServe(t, args()...) // the default 30 s request deadline
	p.waitEvent("artifact-download", map[string]string{"digest": layer.Digest, "state": "started"})
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(10 * time.Second)
	t.Logf("exit %d %s after SIGTERM", code, time.Since(start).Round(time.Millisecond))
	if code != 0 || !strings.Contains(p.output(), `"during":"boot"`) {
		t.Fatalf("exit %d, want 0 with stopped during boot:\n%s", code, p.output())
	}
}
