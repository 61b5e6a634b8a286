package deployenv_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/deployenv"
)

const index = "{\n  \"artifactVersion\": \"20261201.1\",\n  \"packId\": \"acme.ledger\"\n}\n"

var digestA = "sha256:" + strings.Repeat("a", 64)
var digestB = "sha256:" + strings.Repeat("b", 64)

type signer struct {
	id   string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newSigner(t testing.TB, id string) signer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{id, pub, priv}
}

func (s signer) pem(t testing.TB) string {
	der, err := x509.MarshalPKIXPublicKey(s.pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func hashOf(b string) string {
	s := sha256.Sum256([]byte(b))
	return "sha256:" + hex.EncodeToString(s[:])
}

// envelope is what `kindgi build` writes for index, signed by s.
func envelope(t testing.TB, s signer, idx string) *deployenv.Envelope {
	t.Helper()
	e := &deployenv.Envelope{
		Schema: deployenv.Schema, ImageRef: "registry.example/acme/ledger@" + digestA, ImageDigest: digestA,
		ArtifactVersion: "20261201.1", Index: json.RawMessage(idx), IndexHash: hashOf(idx),
		TenantID: "t-acme", PublishedAt: "2026-12-01T10:00:00.000Z",
	}
	sign(t, e, s)
	return e
}

func sign(t testing.TB, e *deployenv.Envelope, s signer) {
	body := deployenv.SignedBody(e.ArtifactVersion, e.ImageDigest, e.IndexHash, e.PublishedAt, e.TenantID)
	e.SignerKeyID, e.SignerPublicKey = s.id, s.pem(t)
	e.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(s.priv, body))
}

func served(digest string) func(context.Context, string) (string, error) {
	return func(context.Context, string) (string, error) { return digest, nil }
}

func TestVerify(t *testing.T) {
	acme, other := newSigner(t, "acme-ci"), newSigner(t, "other")
	trusted := []deployenv.TrustedKey{{KeyID: acme.id, PublicKey: acme.pub}}
	for _, tc := range []struct {
		name   string
		edit   func(e *deployenv.Envelope) // after signing
		index  string                      // the index served (default: the signed one)
		digest func(context.Context, string) (string, error)
		want   error
		msg    string
	}{
		{name: "valid"},
		{name: "tampered index", index: strings.Replace(index, "acme.ledger", "evil.ledger", 1),
			want: deployenv.ImageUnverifiable, msg: "does not match signed indexHash"},
		{name: "wrong key", edit: func(e *deployenv.Envelope) { sign(t, e, other) },
			want: deployenv.SignerNotTrusted, msg: `Signer key "other" is not on this tenant's trust list`},
		{name: "trusted key id, another key", edit: func(e *deployenv.Envelope) { sign(t, e, signer{acme.id, other.pub, other.priv}) },
			want: deployenv.SignerNotTrusted},
		{name: "signed by another key, claims the trusted one", edit: func(e *deployenv.Envelope) {
			sign(t, e, other)
			e.SignerKeyID, e.SignerPublicKey = acme.id, acme.pem(t)
		}, want: deployenv.SignatureInvalid, msg: "does not match canonical envelope"},
		{name: "re-tagged image", digest: served(digestB),
			want: deployenv.ImageUnverifiable, msg: "Registry digest " + digestB + " does not match imageRef digest " + digestA},
		{name: "registry unreachable", digest: func(context.Context, string) (string, error) { return "", errors.New("dial refused") },
			want: deployenv.ImageUnverifiable, msg: "dial refused"},
		{name: "no image to check", want: deployenv.ImageUnverifiable, msg: "no image to check"},
		{name: "modified artifactVersion", edit: func(e *deployenv.Envelope) { e.ArtifactVersion = "20261201.2" }, want: deployenv.SignatureInvalid},
		{name: "modified tenantId", edit: func(e *deployenv.Envelope) { e.TenantID = "t-evil" }, want: deployenv.SignatureInvalid},
		{name: "modified publishedAt", edit: func(e *deployenv.Envelope) { e.PublishedAt = "2027-01-01T00:00:00.000Z" }, want: deployenv.SignatureInvalid},
		{name: "modified indexHash", edit: func(e *deployenv.Envelope) { e.IndexHash = hashOf("other") }, want: deployenv.SignatureInvalid},
		{name: "modified image", edit: func(e *deployenv.Envelope) {
			e.ImageRef, e.ImageDigest = "registry.example/acme/ledger@"+digestB, digestB
		}, digest: served(digestB), want: deployenv.SignatureInvalid},
		{name: "imageDigest not the ref's", edit: func(e *deployenv.Envelope) { e.ImageDigest = digestB }, want: deployenv.SignatureInvalid},
		{name: "index of another artifact, signed", edit: func(e *deployenv.Envelope) {
			e.ArtifactVersion = "20261201.9"
			sign(t, e, acme)
		}, want: deployenv.ImageUnverifiable, msg: `Image /app/index.json is artifact "20261201.1", not the signed 20261201.9`},
		{name: "unsigned", edit: func(e *deployenv.Envelope) { e.Signature = "" }, want: deployenv.SignatureInvalid, msg: "unsigned"},
		{name: "signature not base64", edit: func(e *deployenv.Envelope) { e.Signature = "%%%" }, want: deployenv.SignatureInvalid, msg: "base64"},
		{name: "tag, not digest", edit: func(e *deployenv.Envelope) { e.ImageRef = "registry.example/acme/ledger:1.0" }, want: deployenv.BadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := envelope(t, acme, index)
			if tc.edit != nil {
				tc.edit(e)
			}
			idx := index
			if tc.index != "" {
				idx = tc.index
			}
			digest := served(digestA)
			if tc.digest != nil {
				digest = tc.digest
			}
			if tc.name == "no image to check" {
				digest = nil
			}
			err := deployenv.Verify(context.Background(), e, deployenv.Options{Trusted: trusted, Index: []byte(idx), ImageDigest: digest})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var de *deployenv.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &de) || !strings.Contains(de.Message, tc.msg) {
				t.Fatalf("Verify = %v; want %s containing %q", err, tc.want, tc.msg)
			}
			t.Logf("%v", err)
		})
	}
}

func TestSignedBody(t *testing.T) {
	got := string(deployenv.SignedBody("1<2&3", digestA, "sha256:00", "2026-12-01T10:00:00.000Z", "t\"\n\u2028é"))
	want := `{"artifactVersion":"1<2&3","imageDigest":"` + digestA + `","indexHash":"sha256:00","publishedAt":"2026-12-01T10:00:00.000Z","tenantId":"t\"\n` + "\u2028é" + `"}`
	if got != want {
		t.Fatalf("SignedBody =\n%s\nwant\n%s", got, want)
	}
}

// TestNodeSignedEnvelope has Node's crypto (what kindgi build signs with)
// generate the key and sign its own canonical body (JSON.stringify over
// sorted keys); Verify must accept it and refuse it once a field changes.
func TestNodeSignedEnvelope(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not on PATH; CI=true requires it (.ci/deps.d/50-pack.sh)")
		}
		t.Skip("node is not on PATH")
	}
	dir := t.TempDir()
	writeFile := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	idx := writeFile("index.json", index)
	script := writeFile("sign.mjs", `
import { generateKeyPairSync, sign, createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
const stable = (v) => v === null || typeof v !== 'object' ? JSON.stringify(v)
  : '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + stable(v[k])).join(',') + '}';
const index = readFileSync(process.argv[2]);
const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const env = { $schema: 'kindgi-deploy-envelope/v1', imageRef: 'r.example/a@`+digestA+`', imageDigest: '`+digestA+`',
  artifactVersion: '20261201.1', index: JSON.parse(index), indexHash: 'sha256:' + createHash('sha256').update(index).digest('hex'),
  tenantId: 't-<acme>&\u2028', publishedAt: '2026-12-01T10:00:00.000Z' };
const body = stable({ artifactVersion: env.artifactVersion, imageDigest: env.imageDigest, indexHash: env.indexHash,
  publishedAt: env.publishedAt, tenantId: env.tenantId });
env.signerKeyId = 'node-key';
env.signerPublicKey = publicKey.export({ type: 'spki', format: 'pem' });
env.signature = sign(null, Buffer.from(body), privateKey).toString('base64');
const raw = publicKey.export({ type: 'spki', format: 'der' }).subarray(12).toString('base64');
process.stdout.write(JSON.stringify({ env, trusted: { keys: [{ keyId: 'node-key', publicKey: raw }] } }));
`)
	out, err := exec.Command(node, script, idx).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var res struct {
		Env     json.RawMessage `json:"env"`
		Trusted json.RawMessage `json:"trusted"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	envFile, keysFile := writeFile("deploy-envelope.json", string(res.Env)), writeFile("trusted-keys.json", string(res.Trusted))
	e, err := deployenv.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := deployenv.ReadTrustedKeys(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	opts := deployenv.Options{Trusted: keys, Index: []byte(index), ImageDigest: served(digestA)}
	if err := deployenv.Verify(context.Background(), e, opts); err != nil {
		t.Fatalf("a Node-signed envelope: %v", err)
	}
	e.TenantID = "t-acme"
	if err := deployenv.Verify(context.Background(), e, opts); !errors.Is(err, deployenv.SignatureInvalid) {
		t.Fatalf("modified tenantId: %v", err)
	}
}

func TestParse(t *testing.T) {
	good := `{"$schema":"kindgi-deploy-envelope/v1","imageRef":"r/a@` + digestA + `","imageDigest":"` + digestA + `","artifactVersion":"1","index":{},"indexHash":"` + digestB + `","tenantId":"t","publishedAt":"p"}`
	if _, err := deployenv.Parse([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"schema v2":     strings.Replace(good, "/v1", "/v2", 1),
		"unknown field": strings.Replace(good, `"index":{}`, `"index":{},"extra":1`, 1),
		"no tenant":     strings.Replace(good, `"tenantId":"t"`, `"tenantId":""`, 1),
		"bad digest":    strings.Replace(good, `"imageDigest":"`+digestA, `"imageDigest":"sha256:xyz`, 1),
		"not JSON":      "{",
	} {
		if _, err := deployenv.Parse([]byte(doc)); !errors.Is(err, deployenv.BadInput) {
			t.Errorf("%s: %v; want bad-input", name, err)
		}
	}
}

func TestParseTrustedKeys(t *testing.T) {
	s := newSigner(t, "k")
	raw := base64.StdEncoding.EncodeToString(s.pub)
	pemJSON, _ := json.Marshal(s.pem(t))
	for _, doc := range []string{
		`{"keys":[{"keyId":"k","publicKey":"` + raw + `"}]}`,
		`{"keys":[{"keyId":"k","publicKey":` + string(pemJSON) + `}]}`,
	} {
		keys, err := deployenv.ParseTrustedKeys([]byte(doc))
		if err != nil || len(keys) != 1 || !keys[0].PublicKey.Equal(s.pub) {
			t.Errorf("%s: %v %v", doc, keys, err)
		}
	}
	for _, doc := range []string{`{}`, `{"keys":[{"publicKey":"` + raw + `"}]}`, `{"keys":[{"keyId":"k","publicKey":"AAAA"}]}`, `{"keys":[],"x":1}`} {
		if _, err := deployenv.ParseTrustedKeys([]byte(doc)); err == nil {
			t.Errorf("%s accepted", doc)
		}
	}
}
