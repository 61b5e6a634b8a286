package main

import (
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
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/deployenv"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// packIndexDir lays out conformance/testdata/index-pack (index.json,
// dist/ with its bundle map) with the check module built from
// pack/testdata/checks_reactor.
func packIndexDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "../../conformance/testdata/index-pack"
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, rel), b, 0o644)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../pack/testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(dir, "dist", "guardrails"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "dist", "guardrails", "checks.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeEnvelope: serve --envelope --trusted-keys refuses to boot on a
// tampered index or an untrusted signer, with the Kindgi code in
// boot-failed, and boots on a good envelope; the served index's
// guardrail checks then answer check-invoke (through --bundle-map).
func TestServeEnvelope(t *testing.T) {
	dir := packIndexDir(t)
	index := filepath.Join(dir, "index.json")
	layout, _ := filepath.Abs("../../conformance/testdata/broken-pack/layout")
	// The image: the OCI layout's manifest digest (what --image names below).
	idx, _ := os.ReadFile(filepath.Join(layout, "index.json"))
	var li struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := json.Unmarshal(idx, &li); err != nil || len(li.Manifests) == 0 {
		t.Fatalf("layout index: %v", err)
	}
	digest := li.Manifests[0].Digest
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	keys := filepath.Join(dir, "trusted-keys.json")
	_ = os.WriteFile(keys, []byte(`{"keys":[{"keyId":"acme-ci","publicKey":"`+base64.StdEncoding.EncodeToString(pub)+`"}]}`), 0o644)
	envelope := func(indexBytes []byte, signer ed25519.PrivateKey) string {
		sum := sha256.Sum256(indexBytes)
		e := deployenv.Envelope{Schema: deployenv.Schema, ImageRef: "oci-layout:" + layout + "@" + digest, ImageDigest: digest,
			ArtifactVersion: "20261201.1", Index: json.RawMessage(`{}`), IndexHash: "sha256:" + hex.EncodeToString(sum[:]),
			TenantID: "t1", PublishedAt: "2026-12-01T00:00:00.000Z", SignerKeyID: "acme-ci",
			SignerPublicKey: base64.StdEncoding.EncodeToString(signer.Public().(ed25519.PublicKey))}
		e.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(signer, deployenv.SignedBody(e.ArtifactVersion, e.ImageDigest, e.IndexHash, e.PublishedAt, e.TenantID)))
		b, _ := json.Marshal(e)
		f := filepath.Join(t.TempDir(), "deploy-envelope.json")
		_ = os.WriteFile(f, b, 0o644)
		return f
	}
	indexBytes, _ := os.ReadFile(index)
	args := func(env string) []string {
		return []string{"--index", index, "--module-root", filepath.Join(dir, "dist"), "--bundle-map", filepath.Join(dir, "dist", "bundle-map.json"),
			"--envelope", env, "--trusted-keys", keys, "--cache-dir", sandboxtest.CacheDir(t), "--addr", "127.0.0.1:0"}
	}
	for _, tc := range []struct{ name, env, code string }{
		{"tampered index", envelope(append(indexBytes, ' '), priv), "image-unverifiable"},
		{"untrusted signer", envelope(indexBytes, otherPriv), "signer-not-trusted"},
	} {
		t.Setenv(tokenEnv, "tok") // serve takes the token out of its environment
		code, _, stderr := runCLI(t, "", append([]string{"serve"}, args(tc.env)...)...)
		ev := processEvents(t, stderr, "boot-failed")
		if code != exitError || len(ev) != 1 || !strings.Contains(fmt.Sprint(ev[0]["problems"]), "code:"+tc.code) {
			t.Fatalf("%s: exit %d, stderr %s", tc.name, code, stderr)
		}
		t.Logf("%s: %v", tc.name, ev[0]["problems"])
	}

	p := startServe(t, args(envelope(indexBytes, priv))...)
	ev := p.waitEvent("listening", nil)
	base := fmt.Sprintf("http://127.0.0.1:%d", int(ev["port"].(float64)))
	post := func(body string) (int, string) {
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
	status, body := post(`{"v":2,"kind":"check-invoke","check":{"id":"acme.checks.min-length"},"config":{"minLength":1},"trace":{"runId":"r1","tenantId":"t1","output":"Recorded.","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"}}`)
	t.Logf("check-invoke round trip through serve: %d %s", status, body)
	if status != 200 || body != `{"v":2,"kind":"check-result","result":{"passed":true,"reason":"long enough"}}` {
		t.Fatalf("check-invoke: %d %s", status, body)
	}
	status, body = post(`{"v":2,"kind":"check-invoke","check":{"id":"nope"},"config":{},"trace":{}}`)
	if status != 200 || !strings.Contains(body, `"code":"check-not-in-pack"`) || !strings.Contains(body, `"checkId":"nope"`) {
		t.Fatalf("unknown check: %d %s", status, body)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}
