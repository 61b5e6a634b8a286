package artifact_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// putBlob uploads b to repo with a monolithic upload.
func putBlob(t testing.TB, host, repo string, b []byte) string {
	t.Helper()
	d := artifact.Digest(b)
	resp, err := http.Post("http://"+host+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, "http") {
		loc = "http://" + host + loc
	}
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+d, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("blob upload: %s", resp.Status)
	}
	return d
}

// putManifest stores a raw manifest under tag and returns its digest.
func putManifest(t testing.TB, host, repo, tag, mediaType string, m []byte) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+host+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(m))
	req.Header.Set("Content-Type", mediaType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("manifest put: %s", resp.Status)
	}
	return artifact.Digest(m)
}

type desc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func blobDesc(mt string, b []byte, title string) desc {
	d := desc{MediaType: mt, Digest: artifact.Digest(b), Size: int64(len(b))}
	if title != "" {
		d.Annotations = map[string]string{artifact.AnnotationTitle: title}
	}
	return d
}

func manifestJSON(config desc, layers []desc, version string) []byte {
	m := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config, "layers": layers}
	if version != "" {
		m["annotations"] = map[string]string{artifact.AnnotationVersion: version}
	}
	b, _ := json.Marshal(m)
	return b
}

// pushWasm pushes a CNCF-layout artifact with the given modules through
// the resolver and returns its digest.
func pushWasm(t testing.TB, o *artifact.OCI, ref, version string, mods ...artifact.PushModule) *artifact.Artifact {
	t.Helper()
	a, err := o.Push(ctxT(t), ref, version, mods)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ociRef(image, path, version string) artifact.Ref {
	return artifact.Ref{Kind: artifact.KindOCI, ImageRef: image, ModulePath: path, ArtifactVersion: version}
}

func TestFaults(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	echo := fixture(t, "echo_reactor.wasm")
	counter := fixture(t, "counter_reactor.wasm")

	t.Run("registry down", func(t *testing.T) {
		f := &registrytest.Faults{}
		srv := registrytest.NewInMemory(t, f)
		host := registrytest.Host(srv)
		pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		srv.Close()
		_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "unreachable") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("500s then success", func(t *testing.T) {
		f := &registrytest.Faults{}
		host := registrytest.Host(registrytest.NewInMemory(t, f))
		a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		f.FailNext(2, http.StatusInternalServerError, "/blobs/")
		m, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != a.Layers[0].Digest {
			t.Fatal("wrong module")
		}
		if n := f.Count(http.MethodGet, "/blobs/"+a.Layers[0].Digest); n != 1 {
			t.Fatalf("%d GETs of the layer, want 1 (the config took the two 500s)", n)
		}
		if n := f.Count(http.MethodGet, "/blobs/"); n != 4 {
			t.Fatalf("%d blob GETs, want 4 (two 500s, then the config and the layer)", n)
		}
		f.FailNext(1, http.StatusTooManyRequests, "/manifests/")
		if _, err := newOCI(t, host, nil).Inspect(ctxT(t), host+"/a/b:1"); err != nil {
			t.Fatalf("429 then success: %v", err)
		}
		f.FailNext(100, http.StatusServiceUnavailable, "/manifests/")
		_, err = newOCI(t, host, nil).Inspect(ctxT(t), host+"/a/b:1")
		wantCode(t, err, toolerr.ArtifactUnavailable)
	})

	t.Run("tampered blob", func(t *testing.T) {
		f := &registrytest.Faults{}
		host := registrytest.Host(registrytest.NewInMemory(t, f))
		a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		f.Tamper(a.Layers[0].Digest)
		cacheDir := filepath.Join(t.TempDir(), "cache")
		o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(cacheDir) })
		_, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactIntegrityFailed)
		assertNoBlob(t, cacheDir, a.Layers[0].Digest)
	})

	t.Run("wrong artifactVersion", func(t *testing.T) {
		host := registrytest.Host(registrytest.NewInMemory(t, nil))
		pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "2026.1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "2026.2"))
		te := wantCode(t, err, toolerr.ArtifactIntegrityFailed)
		if !strings.Contains(te.Message, "2026.1") || !strings.Contains(te.Message, "2026.2") {
			t.Fatalf("message must name both versions: %q", te.Message)
		}
		// An artifact without any version is refused as what it is.
		cfg := []byte(`{}`)
		putBlob(t, host, "a/c", cfg)
		putBlob(t, host, "a/c", echo)
		putManifest(t, host, "a/c", "1", "application/vnd.oci.image.manifest.v1+json",
			manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmLayer, echo, "m.wasm")}, ""))
		_, err = newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/c:1", "m.wasm", "2026.2"))
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "carries no version") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("unknown media types", func(t *testing.T) {
		host := registrytest.Host(registrytest.NewInMemory(t, nil))
		cfg := []byte(`{}`)
		putBlob(t, host, "a/b", cfg)
		putBlob(t, host, "a/b", echo)
		putManifest(t, host, "a/b", "cfg", "application/vnd.oci.image.manifest.v1+json",
			manifestJSON(blobDesc("application/x-unknown+json", cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmLayer, echo, "m.wasm")}, "1"))
		putManifest(t, host, "a/b", "layer", "application/vnd.oci.image.manifest.v1+json",
			manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc("text/plain", echo, "m.wasm")}, "1"))
		o := newOCI(t, host, nil)
		for _, tag := range []string{"cfg", "layer"} {
			_, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:"+tag, "m.wasm", "1"))
			wantCode(t, err, toolerr.ArtifactRefused)
		}
		// The older wasm-to-oci layer type is accepted.
		putManifest(t, host, "a/b", "old", "application/vnd.oci.image.manifest.v1+json",
			manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmContentLayer, echo, "m.wasm")}, "1"))
		if _, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:old", "m.wasm", "1")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("missing modulePath", func(t *testing.T) {
		host := registrytest.Host(registrytest.NewInMemory(t, nil))
		pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "a.wasm", Wasm: echo}, artifact.PushModule{Title: "b.wasm", Wasm: counter})
		_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "c.wasm", "1"))
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "a.wasm, b.wasm") {
			t.Fatalf("message should list the modules: %q", te.Message)
		}
	})

	t.Run("tag moved", func(t *testing.T) {
		f := &registrytest.Faults{}
		host := registrytest.Host(registrytest.NewInMemory(t, f))
		pusher := newOCI(t, host, nil)
		pushWasm(t, pusher, host+"/a/b:live", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		long := newOCI(t, host, nil) // default TTL
		short := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithTagTTL(0) })
		for _, o := range []*artifact.OCI{long, short} {
			if m, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:live", "m.wasm", "1")); err != nil || m.Digest != artifact.Digest(echo) {
				t.Fatalf("first resolve: %v", err)
			}
		}
		pushWasm(t, pusher, host+"/a/b:live", "1", artifact.PushModule{Title: "m.wasm", Wasm: counter})
		heads := f.Count(http.MethodHead, "/manifests/live")
		m, err := short.Resolve(ctxT(t), ociRef(host+"/a/b:live", "m.wasm", "1"))
		if err != nil || m.Digest != artifact.Digest(counter) {
			t.Fatalf("after the move, TTL 0: %v (%v)", m, err)
		}
		if f.Count(http.MethodHead, "/manifests/live") != heads+1 {
			t.Fatal("the tag was not re-resolved with HEAD")
		}
		if m, err := long.Resolve(ctxT(t), ociRef(host+"/a/b:live", "m.wasm", "1")); err != nil || m.Digest != artifact.Digest(echo) {
			t.Fatalf("within the TTL the old digest stands: %v", err)
		}
	})

	t.Run("oversized blob", func(t *testing.T) {
		f := &registrytest.Faults{}
		host := registrytest.Host(registrytest.NewInMemory(t, f))
		cfg := []byte(`{}`)
		putBlob(t, host, "a/b", cfg)
		huge := desc{MediaType: artifact.MediaTypeWasmLayer, Digest: artifact.Digest([]byte("huge")), Size: 10 << 30, Annotations: map[string]string{artifact.AnnotationTitle: "m.wasm"}}
		putManifest(t, host, "a/b", "1", "application/vnd.oci.image.manifest.v1+json", manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{huge}, "1"))
		o := newOCI(t, host, nil)
		_, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactRefused)
		_, err = o.Pull(ctxT(t), host+"/a/b:1")
		wantCode(t, err, toolerr.ArtifactRefused)
		if n := f.Count(http.MethodGet, "/blobs/"+huge.Digest); n != 0 {
			t.Fatalf("%d GETs of the 10 GB layer: it must not be requested", n)
		}
		// A small descriptor whose blob the registry claims is 10 GB.
		small := []byte("\x00asm\x01\x00\x00\x00")
		putBlob(t, host, "a/c", cfg)
		putManifest(t, host, "a/c", "1", "application/vnd.oci.image.manifest.v1+json",
			manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmLayer, small, "m.wasm")}, "1"))
		f.ClaimLength(artifact.Digest(small), 10<<30)
		_, err = o.Resolve(ctxT(t), ociRef(host+"/a/c:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactIntegrityFailed)
	})

	t.Run("oversized manifest", func(t *testing.T) {
		var gets int
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				return
			}
			mu.Lock()
			gets++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", fmt.Sprint(int64(1<<30)))
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		host := registrytest.Host(srv)
		_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactRefused)
	})

	t.Run("interrupted download", func(t *testing.T) {
		f := &registrytest.Faults{}
		host := registrytest.Host(registrytest.NewInMemory(t, f))
		big := fixture(t, "go_echo_reactor.wasm")
		a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: big})
		d := a.Layers[0].Digest
		f.Cut(d, 1) // once: the retry completes it
		if m, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1")); err != nil || m.Digest != d {
			t.Fatalf("after one interruption: %v", err)
		}
		f.Cut(d, 100) // always: give up, leave nothing behind
		cacheDir := filepath.Join(t.TempDir(), "cache")
		o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(cacheDir) })
		_, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.ArtifactUnavailable)
		assertNoBlob(t, cacheDir, d)
	})

	t.Run("deadline", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				return
			}
			<-release // hangs until the test ends
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		host := registrytest.Host(srv)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := newOCI(t, host, nil).Resolve(ctx, ociRef(host+"/a/b:1", "m.wasm", "1"))
		wantCode(t, err, toolerr.DeadlineExceeded)
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("resolve returned after %s, past the 300ms deadline", el)
		}
	})

	t.Run("plain HTTP needs --insecure-registry", func(t *testing.T) {
		host := registrytest.Host(registrytest.NewInMemory(t, nil))
		o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(t.TempDir()).WithKeychain(authn.NewMultiKeychain()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.Inspect(ctxT(t), host+"/a/b:1")
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "--insecure-registry") {
			t.Fatalf("message %q", te.Message)
		}
		if _, err := artifact.NewOCI(artifact.NewOCIConfig().WithInsecureRegistries("192.168.1.10:5000")); err == nil {
			t.Fatal("a non-loopback insecure registry was accepted")
		}
	})
}

func assertNoBlob(t *testing.T, cacheDir, d string) {
	t.Helper()
	p := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
	if _, err := os.Stat(p); err == nil {
		t.Fatalf("a blob that failed verification is in the cache: %s", p)
	}
	tmps, _ := os.ReadDir(filepath.Join(cacheDir, "tmp"))
	if len(tmps) != 0 {
		t.Fatalf("temporary files left behind: %v", tmps)
	}
}

// TestDockerConfigKeychain resolves from a registry that demands basic auth,
// with the credentials in a docker config.json (DOCKER_CONFIG).
func TestDockerConfigKeychain(t *testing.T) {
	inner := registrytest.NewInMemory(t, nil)
	pub := registrytest.Host(inner)
	pushWasm(t, newOCI(t, pub, nil), pub+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: fixture(t, "echo_reactor.wasm")})
	target := inner.Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"auth"}]}`, http.StatusUnauthorized)
			return
		}
		target.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := registrytest.Host(srv)

	_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1"))
	wantCode(t, err, toolerr.ArtifactUnavailable) // anonymous

	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithKeychain(authn.DefaultKeychain) })
	if _, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:1", "m.wasm", "1")); err != nil {
		t.Fatalf("with docker config credentials: %v", err)
	}
}

// TestImageLayers resolves modules that are files inside ordinary image
// layers (tar and tar+gzip), with a later layer overriding and deleting files.
func TestImageLayers(t *testing.T) {
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	lower := tarLayer(t, false, map[string][]byte{"app/echo.wasm": counter, "app/gone.wasm": echo, "app/keep.wasm": echo})
	upper := tarLayer(t, true, map[string][]byte{"app/echo.wasm": echo, "app/.wh.gone.wasm": nil})
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	for _, b := range [][]byte{cfg, lower, upper} {
		putBlob(t, host, "img/x", b)
	}
	putManifest(t, host, "img/x", "1", "application/vnd.oci.image.manifest.v1+json", manifestJSON(
		blobDesc("application/vnd.oci.image.config.v1+json", cfg, ""),
		[]desc{blobDesc("application/vnd.oci.image.layer.v1.tar", lower, ""), blobDesc("application/vnd.oci.image.layer.v1.tar+gzip", upper, "")}, "3"))
	o := newOCI(t, host, nil)
	for _, c := range []struct {
		path string
		want []byte
		code toolerr.Code
	}{
		{"app/echo.wasm", echo, ""},  // upper layer wins
		{"/app/keep.wasm", echo, ""}, // from the lower layer; leading slash ignored
		{"app/gone.wasm", nil, toolerr.ArtifactUnavailable},
		{"app/none.wasm", nil, toolerr.ArtifactUnavailable},
	} {
		m, err := o.Resolve(ctxT(t), ociRef(host+"/img/x:1", c.path, "3"))
		if c.code != "" {
			wantCode(t, err, c.code)
			continue
		}
		if err != nil || !bytes.Equal(m.Bytes, c.want) {
			t.Fatalf("%s: %v", c.path, err)
		}
	}
	// The finding is memoised: a second resolve reads no layer.
	before := f.Count(http.MethodGet, "/blobs/")
	if _, err := o.Resolve(ctxT(t), ociRef(host+"/img/x:1", "app/echo.wasm", "3")); err != nil {
		t.Fatal(err)
	}
	if f.Count(http.MethodGet, "/blobs/") != before {
		t.Fatal("a memoised module fetched a layer again")
	}
}

func tarLayer(t *testing.T, gz bool, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, name := range sortedNames(files) {
		b := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func sortedNames(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestIndexPicksWasmPlatform follows an image index to its wasm manifest.
func TestIndexPicksWasmPlatform(t *testing.T) {
	host := registrytest.Host(registrytest.NewInMemory(t, nil))
	echo := fixture(t, "echo_reactor.wasm")
	a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:wasm", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
	other := pushWasm(t, newOCI(t, host, nil), host+"/a/b:other", "1", artifact.PushModule{Title: "x.wasm", Wasm: echo})
	idx, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []desc{
			{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: other.Digest, Size: other.Size - other.Layers[0].Size - 0, Platform: map[string]string{"os": "linux", "architecture": "amd64"}},
			{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: a.Digest, Size: -1, Platform: map[string]string{"os": "wasip1", "architecture": "wasm"}},
		},
	})
	putManifest(t, host, "a/b", "multi", "application/vnd.oci.image.index.v1+json", idx)
	o := newOCI(t, host, nil)
	m, err := o.Resolve(ctxT(t), ociRef(host+"/a/b:multi", "m.wasm", "1"))
	if err != nil || m.Digest != artifact.Digest(echo) {
		t.Fatalf("%v", err)
	}
	art, err := o.Inspect(ctxT(t), host+"/a/b:multi")
	if err != nil || art.Digest != a.Digest || art.Index == "" {
		t.Fatalf("inspect through the index: %+v %v", art, err)
	}
}

// TestConcurrentResolvesShareOneDownload hammers one ref from many
// goroutines of one resolver: every call gets the module, and each blob is
// downloaded once.
func TestConcurrentResolvesShareOneDownload(t *testing.T) {
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: fixture(t, "go_echo_reactor.wasm")})
	o := newOCI(t, host, nil)
	sandboxtest.Hammer(t, 16, 1, func(_, _ int) {
		m, err := o.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
		if err == nil && m.Digest != a.Layers[0].Digest {
			err = fmt.Errorf("wrong digest %s", m.Digest)
		}
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	if n := f.Count(http.MethodGet, "/blobs/"+a.Layers[0].Digest); n != 1 {
		t.Fatalf("the layer was downloaded %d times", n)
	}
}

// TestTamperedTarLayer: a tampered tar+gzip layer is reported as an
// integrity failure, not as a broken archive.
func TestTamperedTarLayer(t *testing.T) {
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	echo := fixture(t, "echo_reactor.wasm")
	layer := tarLayer(t, true, map[string][]byte{"app/echo.wasm": echo})
	cfg := []byte(`{"architecture":"amd64","os":"linux"}`)
	putBlob(t, host, "img/x", cfg)
	putBlob(t, host, "img/x", layer)
	putManifest(t, host, "img/x", "1", "application/vnd.oci.image.manifest.v1+json", manifestJSON(
		blobDesc("application/vnd.docker.container.image.v1+json", cfg, ""),
		[]desc{blobDesc("application/vnd.docker.image.rootfs.diff.tar.gzip", layer, "")}, "1"))
	f.Tamper(artifact.Digest(layer))
	_, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/img/x:1", "app/echo.wasm", "1"))
	wantCode(t, err, toolerr.ArtifactIntegrityFailed)
}
