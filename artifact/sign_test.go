package artifact_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// cosignKey makes an ECDSA P-256 key pair (what `cosign generate-key-pair`
// makes) and writes its public half as cosign.pub.
func cosignKey(t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	p := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return k, p
}

// signPayload writes, in dir, cosign's simple-signing payload for digest
// (as payload.json) and an ORAS annotation file carrying its signature by
// k, and returns the annotation file's name.
func signPayload(t *testing.T, dir string, k *ecdsa.PrivateKey, repo, digest string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": repo},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	ann, _ := json.Marshal(map[string]map[string]string{"payload.json": {artifact.AnnotationCosignSignature: base64.StdEncoding.EncodeToString(sig)}})
	writeFiles(t, dir, map[string][]byte{"payload.json": payload, "ann.json": ann})
	return "ann.json"
}

// TestCosignKeyVerification: with a verify key, only artifacts carrying a
// cosign key-based signature by it resolve. Signatures are made in the test
// (ECDSA P-256 over cosign's simple-signing payload) and pushed with ORAS
// both ways cosign stores them: the sha256-<hex>.sig tag, and as a
// referrer (oras attach; docker-registry 2.8 has no referrers API, so ORAS
// writes the referrers tag schema).
func TestCosignKeyVerification(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	reg := registrytest.Start(t)
	host := reg.Host
	dir := t.TempDir()
	oras := newClient(t, "oras", dir, "--plain-http")
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	key, pubFile := cosignKey(t)
	other, _ := cosignKey(t)
	pub, err := artifact.LoadVerifyKey(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	verifying := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig {
		return c.WithVerifyKeys([]crypto.PublicKey{pub}...).WithTagTTL(0)
	})
	push := func(repo string, wasm []byte) *artifact.Artifact {
		return pushWasm(t, newOCI(t, host, nil), host+"/"+repo+":1", "1", artifact.PushModule{Title: "m.wasm", Wasm: wasm})
	}
	sigTag := func(d string) string { return "sha256-" + strings.TrimPrefix(d, "sha256:") + ".sig" }

	t.Run("cosign .sig tag", func(t *testing.T) {
		a := push("sig/tag", echo)
		ann := signPayload(t, dir, key, host+"/sig/tag", a.Digest)
		oras.run("push", host+"/sig/tag:"+sigTag(a.Digest), "payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", ann)
		if _, err := verifying.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1")); err != nil {
			t.Fatalf("signed artifact: %v", err)
		}
		insp, err := verifying.Inspect(ctxT(t), a.Ref)
		if err != nil || len(insp.Referrers) != 1 || insp.Referrers[0].Via != "cosign tag" {
			t.Fatalf("inspect referrers: %+v %v", insp, err)
		}
	})

	t.Run("referrer (oras attach)", func(t *testing.T) {
		a := push("sig/ref", echo)
		ann := signPayload(t, dir, key, host+"/sig/ref", a.Digest)
		oras.run("attach", "--artifact-type", artifact.ArtifactTypeCosignSig, a.Ref, "payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", ann)
		if _, err := verifying.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1")); err != nil {
			t.Fatalf("signed artifact: %v", err)
		}
		if _, err := verifying.Pull(ctxT(t), a.Ref); err != nil {
			t.Fatalf("pull of a signed artifact: %v", err)
		}
	})

	t.Run("unsigned is refused", func(t *testing.T) {
		a := push("sig/none", echo)
		_, err := verifying.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "not signed") {
			t.Fatalf("message %q", te.Message)
		}
		_, err = verifying.Pull(ctxT(t), a.Ref)
		wantCode(t, err, toolerr.ArtifactRefused)
		// Without a key the same artifact resolves.
		if _, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("another key's signature is refused", func(t *testing.T) {
		a := push("sig/other", echo)
		ann := signPayload(t, dir, other, host+"/sig/other", a.Digest)
		oras.run("push", host+"/sig/other:"+sigTag(a.Digest), "payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", ann)
		_, err := verifying.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
		if te := wantCode(t, err, toolerr.ArtifactIntegrityFailed); !strings.Contains(te.Message, "does not verify") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("tampered artifact is refused", func(t *testing.T) {
		// The signed artifact's tag is moved to other content: the new
		// manifest has no signature, and the old signature names the old digest.
		a := push("sig/moved", echo)
		ann := signPayload(t, dir, key, host+"/sig/moved", a.Digest)
		oras.run("push", host+"/sig/moved:"+sigTag(a.Digest), "payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", ann)
		if _, err := verifying.Resolve(ctxT(t), ociRef(host+"/sig/moved:1", "m.wasm", "1")); err != nil {
			t.Fatalf("before the move: %v", err)
		}
		b := push("sig/moved", counter)
		_, err := verifying.Resolve(ctxT(t), ociRef(host+"/sig/moved:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactRefused)
		// A signature copied onto the new digest's tag names the old digest.
		oras.run("push", host+"/sig/moved:"+sigTag(b.Digest), "payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", ann)
		_, err = verifying.Resolve(ctxT(t), ociRef(host+"/sig/moved:1", "m.wasm", "1"))
		if te := wantCode(t, err, toolerr.ArtifactIntegrityFailed); !strings.Contains(te.Message, "signs "+a.Digest) {
			t.Fatalf("message %q", te.Message)
		}
	})

	if _, err := artifact.LoadVerifyKey(filepath.Join(dir, "payload.json")); err == nil {
		t.Fatal("a JSON file was accepted as a verify key")
	}
}
