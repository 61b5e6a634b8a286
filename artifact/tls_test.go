package artifact_test

import (
	"bytes"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// dockerConfig writes a docker config.json with user:password for host,
// points DOCKER_CONFIG at it and returns its path.
func dockerConfig(t *testing.T, host, user, password string) string {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	return p
}

// TestRegistryTLSAndAuth runs against a docker-registry serving TLS with a
// CA made in the test and demanding htpasswd auth; ORAS pushes to it.
func TestRegistryTLSAndAuth(t *testing.T) {
	ca := registrytest.NewTestCA(t)
	reg := registrytest.StartWith(t, registrytest.Options{TLSCert: ca.CertFile, TLSKey: ca.KeyFile, Htpasswd: registrytest.WriteHtpasswd(t)})
	host := reg.Host
	dir := t.TempDir()
	echo := fixture(t, "echo_reactor.wasm")
	writeFiles(t, dir, map[string][]byte{"echo.wasm": echo})
	oras := newClient(t, "oras", dir, "--ca-file", ca.CAFile, "-u", registrytest.HtpasswdUser, "-p", registrytest.HtpasswdPassword)
	digest := digestOf(t, oras.run("push", host+"/tls/echo:1", "echo.wasm:application/wasm", "--artifact-type", artifact.MediaTypeWasmConfig, "--annotation", artifact.AnnotationVersion+"=1"))
	ref := ociRef(host+"/tls/echo@"+digest, "echo.wasm", "1")

	tlsOCI := func(t *testing.T, mod func(artifact.OCIConfig) artifact.OCIConfig) *artifact.OCI {
		o, err := artifact.NewOCI(mod(artifact.NewOCIConfig().WithCacheDir(filepath.Join(t.TempDir(), "c")).WithCertsDir("")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		return o
	}
	anon := func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithKeychain(authn.NewMultiKeychain()) }

	t.Run("unknown CA: the hint names --registry-ca", func(t *testing.T) {
		_, err := tlsOCI(t, anon).Resolve(ctxT(t), ref)
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "--registry-ca") || strings.Contains(te.Message, "--insecure-registry") {
			t.Fatalf("message %q", te.Message)
		}
	})
	t.Run("plain HTTP to a TLS registry", func(t *testing.T) {
		_, err := tlsOCI(t, func(c artifact.OCIConfig) artifact.OCIConfig { return anon(c).WithInsecureRegistries(host) }).Resolve(ctxT(t), ref)
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "TLS") {
			t.Fatalf("message %q", te.Message)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		cfg := dockerConfig(t, "other.example:5000", "x", "y")
		_, err := tlsOCI(t, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithRegistryCA(ca.CAFile) }).Resolve(ctxT(t), ref)
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "none were found") || !strings.Contains(te.Message, cfg) {
			t.Fatalf("message %q", te.Message)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		cfg := dockerConfig(t, host, registrytest.HtpasswdUser, "wrong")
		_, err := tlsOCI(t, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithRegistryCA(ca.CAFile) }).Resolve(ctxT(t), ref)
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "rejected the credentials") || !strings.Contains(te.Message, cfg) {
			t.Fatalf("message %q", te.Message)
		}
	})
	t.Run("--registry-ca and docker config credentials", func(t *testing.T) {
		dockerConfig(t, host, registrytest.HtpasswdUser, registrytest.HtpasswdPassword)
		o := tlsOCI(t, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithRegistryCA(ca.CAFile) })
		if m, err := o.Resolve(ctxT(t), ref); err != nil || m.Digest != artifact.Digest(echo) {
			t.Fatalf("%v", err)
		}
		if _, err := o.Push(ctxT(t), host+"/tls/pushed:1", "1", []artifact.PushModule{{Title: "echo.wasm", Wasm: echo}}); err != nil {
			t.Fatalf("push over TLS with auth: %v", err)
		}
	})
	t.Run("certs.d/<host>/ca.crt", func(t *testing.T) {
		dockerConfig(t, host, registrytest.HtpasswdUser, registrytest.HtpasswdPassword)
		certs := t.TempDir()
		os.MkdirAll(filepath.Join(certs, host), 0o755)
		b, _ := os.ReadFile(ca.CAFile)
		os.WriteFile(filepath.Join(certs, host, "ca.crt"), b, 0o644)
		o := tlsOCI(t, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCertsDir(certs) })
		if _, err := o.Resolve(ctxT(t), ref); err != nil {
			t.Fatalf("%v", err)
		}
	})
	if _, err := artifact.NewOCI(artifact.NewOCIConfig().WithRegistryCA(filepath.Join(t.TempDir(), "none.pem"))); err == nil {
		t.Fatal("a missing --registry-ca file was accepted")
	}
}

// TestErrorTexts: registry failures are told in sandboxd's words.
func TestErrorTexts(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	echo := fixture(t, "echo_reactor.wasm")
	cfg := []byte(`{"architecture":"wasm","os":"wasip1"}`)
	putBlob(t, host, "a/b", cfg)
	// A manifest naming a layer that was never pushed.
	putManifest(t, host, "a/b", "1", "application/vnd.oci.image.manifest.v1+json",
		manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmLayer, echo, "m.wasm")}, "1"))
	for _, c := range []struct {
		name, ref string
		prep      func()
		want      []string
		not       []string
	}{
		{"missing blob", host + "/a/b:1", nil, []string{"lacks this blob", "GET blob " + artifact.Digest(echo)}, nil},
		{"unknown tag", host + "/a/b:2", nil, []string{`resolving tag "2"`}, []string{"HEAD responses have no body"}},
		{"5xx after retries", host + "/a/b:1", func() { f.FailNext(100, http.StatusServiceUnavailable, "/manifests/") }, []string{"503", "4 attempts", "retried"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.prep != nil {
				c.prep()
				defer f.FailNext(0, 0, "")
			}
			_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(c.ref, "m.wasm", "1"))
			te := wantCode(t, err, toolerr.ArtifactUnavailable)
			for _, w := range c.want {
				if !strings.Contains(te.Message, w) {
					t.Errorf("message lacks %q: %q", w, te.Message)
				}
			}
			for _, w := range c.not {
				if strings.Contains(te.Message, w) {
					t.Errorf("message has %q: %q", w, te.Message)
				}
			}
		})
	}
}

// TestTokenRealmOnAnotherLoopbackPort: a loopback registry whose bearer
// token realm is a token server on another loopback port (as a local
// registry with a separate auth service has) is accepted.
func TestTokenRealmOnAnotherLoopbackPort(t *testing.T) {
	inner := registrytest.NewInMemory(t, nil)
	pub := registrytest.Host(inner)
	a := pushWasm(t, newOCI(t, pub, nil), pub+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: fixture(t, "echo_reactor.wasm")})
	var tokens int
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("service") != "test-registry" || !strings.Contains(r.URL.Query().Get("scope"), "repository:a/b:pull") {
			http.Error(w, "bad token request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		tokens++
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"token":"good-token","expires_in":300}`))
	}))
	t.Cleanup(tokenSrv.Close)
	target := inner.Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good-token" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+tokenSrv.URL+`/token",service="test-registry",scope="repository:a/b:pull"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
			return
		}
		target.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := registrytest.Host(srv)
	m, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b@"+a.Digest, "m.wasm", "1"))
	if err != nil || m.Digest != a.Layers[0].Digest {
		t.Fatalf("%v", err)
	}
	if tokens == 0 {
		t.Fatal("no token was fetched from the realm")
	}
}

// TestSHA512Blobs: a manifest naming its config and module by sha512
// digests (docker-registry stores them as such) resolves, each blob
// verified with sha512; a tampered sha512 blob is refused.
func TestSHA512Blobs(t *testing.T) {
	reg := registrytest.Start(t)
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewProxy(t, reg.Host, f))
	echo := fixture(t, "echo_reactor.wasm")
	cfg := []byte(`{"architecture":"wasm","os":"wasip1"}`)
	d512 := func(b []byte) string {
		sum := sha512.Sum512(b)
		return "sha512:" + hex.EncodeToString(sum[:])
	}
	upload := func(b []byte) string {
		d := d512(b)
		resp, err := http.Post("http://"+reg.Host+"/v2/s/x/blobs/uploads/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if !strings.HasPrefix(loc, "http") {
			loc = "http://" + reg.Host + loc
		}
		sep := "?"
		if strings.Contains(loc, "?") {
			sep = "&"
		}
		req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+d, bytes.NewReader(b))
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("sha512 upload: %s", resp.Status)
		}
		return d
	}
	layer := desc{MediaType: artifact.MediaTypeWasmLayer, Digest: upload(echo), Size: int64(len(echo)), Annotations: map[string]string{artifact.AnnotationTitle: "m.wasm"}}
	config := desc{MediaType: artifact.MediaTypeWasmConfig, Digest: upload(cfg), Size: int64(len(cfg))}
	putManifest(t, reg.Host, "s/x", "1", "application/vnd.oci.image.manifest.v1+json", manifestJSON(config, []desc{layer}, "1"))
	m, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/s/x:1", "m.wasm", "1"))
	if err != nil || !bytes.Equal(m.Bytes, echo) || m.Digest != layer.Digest {
		t.Fatalf("%v (%+v)", err, m)
	}
	f.Tamper(layer.Digest)
	_, err = newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/s/x:1", "m.wasm", "1"))
	wantCode(t, err, toolerr.ArtifactIntegrityFailed)
}
