package conformance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/deployenv"
	"github.com/sandboxd/sandboxd/pack"
)

// copyDir copies the regular files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// indexPack assembles testdata/index-pack with the check module built
// from pack/testdata/checks_reactor (see its README.md).
func indexPack(t *testing.T) (dir string, opts Options) {
	t.Helper()
	dir = t.TempDir()
	copyDir(t, "testdata/index-pack", dir)
	mod, err := os.ReadFile("../pack/testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "dist", "guardrails"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dist", "guardrails", "checks.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	bm, err := pack.ReadBundleMap(filepath.Join(dir, "dist", "bundle-map.json"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, Options{Index: filepath.Join(dir, "index.json"), ModuleRoot: filepath.Join(dir, "dist"), BundleMap: bm}
}

func failures(rep *Report) string {
	var got []string
	for _, c := range rep.Checks {
		if c.Status == StatusFail {
			got = append(got, c.Tool+" "+c.Name+" "+c.Code)
		}
	}
	sort.Strings(got)
	return strings.Join(got, "\n")
}

// TestIndexPack checks a Kindgi-built index (tools and guardrail checks,
// source modulePaths mapped by the bundle map): every check passes but
// the one guardrail whose module answers without "passed".
func TestIndexPack(t *testing.T) {
	_, opts := indexPack(t)
	rep := run(t, "", opts)
	sum := summary(t, rep, false)
	t.Logf("conformance summary of the index pack:\n%s", sum)
	golden(t, "index-pack.summary.golden", sum)
	if got, want := failures(rep), "acme.no-verdict probe output-schema output-validation-failed"; got != want {
		t.Errorf("failures:\n%s\nwant:\n%s", got, want)
	}
	for _, c := range rep.Checks {
		if c.Tool == "acme.checks.min-length" && strings.HasPrefix(c.Name, "case ") && c.Status != StatusPass {
			t.Errorf("%s: %s %s", c.Name, c.Status, c.Reason)
		}
	}
}

func TestIndexPackBadEntries(t *testing.T) {
	_, opts := indexPack(t)
	// A guardrail whose module is gone, and a declared config its schema refuses.
	b, _ := os.ReadFile(opts.Index)
	s := strings.Replace(string(b), `"guardrails/no-verdict/index.ts"`, `"guardrails/gone/index.ts"`, 1)
	s = strings.Replace(s, `"minLength": 1`, `"minLength": -1`, 1)
	if err := os.WriteFile(opts.Index, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := run(t, "", opts)
	got := failures(rep)
	for _, w := range []string{"acme.checks.min-length config input-validation-failed", "acme.no-verdict artifact artifact-unavailable", "no-verdict.cases.json cases check-not-in-pack"} {
		if !strings.Contains(got, w) {
			t.Errorf("failures:\n%s\nwant a line %q", got, w)
		}
	}
}

func TestIndexPackRefused(t *testing.T) {
	_, opts := indexPack(t)
	if err := os.WriteFile(opts.Index, []byte(`{"v":1,"packId":"a"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := run(t, "", opts)
	if got := failures(rep); got != "pack index invalid-tool-definition" {
		t.Fatalf("failures %q", got)
	}
	// An index a pack service reads but that breaks the schema: the index
	// check fails, its entries are still checked.
	_, opts2 := indexPack(t)
	b, _ := os.ReadFile(opts2.Index)
	_ = os.WriteFile(opts2.Index, []byte(strings.Replace(string(b), `"publishedAt": "2026-12-01T00:00:00.000Z"`, `"publishedAt": "today"`, 1)), 0o644)
	rep = run(t, "", opts2)
	if got := failures(rep); !strings.Contains(got, "pack index invalid-tool-definition") || !strings.Contains(got, "acme.no-verdict probe output-schema") {
		t.Fatalf("failures %q", got)
	}
	// Usage problems are infrastructure errors.
	for name, o := range map[string]Options{
		"no module root":         {Index: opts.Index},
		"missing index":          {Index: opts.Index + ".gone", ModuleRoot: opts.ModuleRoot},
		"envelope without keys":  {Index: opts.Index, ModuleRoot: opts.ModuleRoot, Envelope: "x"},
		"envelope without index": {Envelope: "x", TrustedKeys: "y"},
	} {
		o.OCI = ociClient(t)
		src := ""
		if name == "envelope without index" {
			src = samplePack
		}
		if rep, err := Run(context.Background(), src, o); rep != nil || err == nil {
			t.Errorf("%s: Run = %v, %v; want an infrastructure error", name, rep, err)
		}
	}
}

const kindgiPackJSON = `{
  "manifestVersion": "1.0", "id": "com.acme.support", "version": "1.0.0", "name": "Acme support",
  "tools": [{"path": "identity.tool.json"}],
  "guardrails": [
    {"id": "acme.no-empty", "kind": "zero-llm", "check": "acme.checks.no-empty", "action": {"on-violation": "halt"},
     "config": {"minLength": 1}, "configSchema": {"type": "object", "properties": {"minLength": {"type": "integer"}}},
     "limits": {"memMB": 64, "cpuMs": 1000},
     "codeArtifactRef": {"kind": "filesystem", "modulePath": "checks.wasm"}},
    {"id": "acme.cites", "kind": "zero-llm", "check": "must-cite", "action": {"on-violation": "halt"}}
  ]
}`

// TestKindgiPackJSON checks a directory whose pack.json follows Kindgi's
// pack schema: its tools and guardrails are those it lists; deploy-ness
// comes from the flag.
func TestKindgiPackJSON(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, samplePack, dir)
	mod, err := os.ReadFile("../pack/testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "checks.wasm"), mod, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "pack.json"), []byte(kindgiPackJSON), 0o644)
	for _, f := range []string{"echo.cases.json", "lookup.cases.json"} { // tools pack.json does not list
		_ = os.Remove(filepath.Join(dir, "cases", f))
	}
	_ = os.WriteFile(filepath.Join(dir, "cases", "no-empty.cases.json"), []byte(`{"check":"acme.checks.no-empty","cases":[
	  {"name":"passes","trace":{"output":"ok"},"expect":{"output":{"passed":true,"reason":"long enough"}}}]}`), 0o644)
	rep := run(t, dir, Options{})
	if rep.Failed() {
		t.Fatalf("the Kindgi pack fails:\n%s", summary(t, rep, false))
	}
	var tools []string
	for _, c := range rep.Checks {
		if c.Name == "manifest" || c.Tool == "pack" {
			tools = append(tools, c.Tool+"/"+c.Name)
		}
	}
	// echo and lookup sit in the directory as *.tool.json, but pack.json
	// does not list them: they are not part of the pack.
	if got := strings.Join(tools, " "); got != "pack/pack.json pack/guardrails acme.identity/manifest acme.checks.no-empty/manifest" {
		t.Errorf("checked %s", got)
	}
	rep = run(t, dir, Options{Deploy: true})
	if got := failures(rep); got != "acme.checks.no-empty artifact-ref artifact-refused\nacme.identity artifact-ref artifact-refused" {
		t.Errorf("--deploy failures:\n%s", got)
	}
	// A pack.json that breaks Kindgi's schema fails the run's pack.json check.
	_ = os.WriteFile(filepath.Join(dir, "pack.json"), []byte(strings.Replace(kindgiPackJSON, `"name": "Acme support",`, "", 1)), 0o644)
	rep = run(t, dir, Options{})
	if got := failures(rep); got != "pack pack.json invalid-tool-definition" || !strings.Contains(rep.Checks[0].Reason, "missing property 'name'") {
		t.Errorf("failures %q: %s", got, rep.Checks[0].Reason)
	}
}

// TestEnvelope verifies a deploy envelope signed in the test against an
// OCI image layout on disk (the served image), for every tampering.
func TestEnvelope(t *testing.T) {
	_, opts := indexPack(t)
	// Only the envelope matters here: the index keeps its tool, not its checks.
	b, _ := os.ReadFile(opts.Index)
	var ix map[string]any
	_ = json.Unmarshal(b, &ix)
	ix["guardrails"] = []any{}
	b, _ = json.MarshalIndent(ix, "", "  ")
	_ = os.WriteFile(opts.Index, append(b, '\n'), 0o644)
	opts.Cases = t.TempDir()
	oci := ociClient(t)
	layout, _ := filepath.Abs(filepath.Join(brokenPack, "layout"))
	art, err := oci.Inspect(context.Background(), "oci-layout:"+layout+":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	index, _ := os.ReadFile(opts.Index)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	other, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	keys := filepath.Join(dir, "trusted-keys.json")
	_ = os.WriteFile(keys, []byte(`{"keys":[{"keyId":"acme-ci","publicKey":"`+base64.StdEncoding.EncodeToString(pub)+`"}]}`), 0o644)
	envelope := func(idx []byte, digest string, signer ed25519.PrivateKey, signerPub ed25519.PublicKey) string {
		sum := sha256.Sum256(idx)
		e := deployenv.Envelope{Schema: deployenv.Schema, ImageRef: "oci-layout:" + layout + "@" + digest, ImageDigest: digest,
			ArtifactVersion: "20261201.1", Index: json.RawMessage(`{}`), IndexHash: "sha256:" + hex.EncodeToString(sum[:]),
			TenantID: "t1", PublishedAt: "2026-12-01T00:00:00.000Z", SignerKeyID: "acme-ci",
			SignerPublicKey: base64.StdEncoding.EncodeToString(signerPub)}
		e.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(signer, deployenv.SignedBody(e.ArtifactVersion, e.ImageDigest, e.IndexHash, e.PublishedAt, e.TenantID)))
		b, _ := json.Marshal(e)
		f := filepath.Join(t.TempDir(), "deploy-envelope.json")
		_ = os.WriteFile(f, b, 0o644)
		return f
	}
	for _, tc := range []struct{ name, envelope, want string }{
		{"valid", envelope(index, art.Digest, priv, pub), ""},
		{"tampered index", envelope(append([]byte(" "), index...), art.Digest, priv, pub), "image-unverifiable"},
		{"wrong key", envelope(index, art.Digest, otherPriv, other), "signer-not-trusted"},
		{"re-tagged image", envelope(index, "sha256:"+strings.Repeat("0", 64), priv, pub), "image-unverifiable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.OCI, o.Envelope, o.TrustedKeys = oci, tc.envelope, keys
			rep := run(t, "", o)
			var env *Check
			for i := range rep.Checks {
				if rep.Checks[i].Tool == "pack" && rep.Checks[i].Name == "envelope" {
					env = &rep.Checks[i]
				}
			}
			if env == nil {
				t.Fatal("no envelope check")
			}
			t.Logf("%s %s %s", env.Status, env.Code, env.Reason)
			if tc.want == "" && env.Status != StatusPass || tc.want != "" && (env.Status != StatusFail || env.Code != tc.want) {
				t.Fatalf("envelope check %s %s: %s; want %q", env.Status, env.Code, env.Reason, tc.want)
			}
		})
	}
}
