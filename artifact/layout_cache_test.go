package artifact_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

func TestLayoutRefs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	o := newOCI(t, "localhost:1", nil)
	v1 := pushWasm(t, o, "oci-layout:"+dir+":v1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
	// One tag in the layout: the bare directory selects it.
	if m, err := o.Resolve(ctxT(t), ociRef("oci-layout:"+dir, "m.wasm", "1")); err != nil || !bytes.Equal(m.Bytes, echo) {
		t.Fatalf("bare layout dir: %v", err)
	}
	v2 := pushWasm(t, o, "oci-layout:"+dir+":v2", "2", artifact.PushModule{Title: "m.wasm", Wasm: counter})
	for _, c := range []struct {
		ref, version string
		want         []byte
		code         toolerr.Code
	}{
		{"oci-layout:" + dir + ":v1", "1", echo, ""},
		{"oci-layout:" + dir + ":v2", "2", counter, ""},
		{v1.Ref, "1", echo, ""},
		{v2.Ref, "2", counter, ""},
		{"oci-layout:" + dir, "1", nil, toolerr.ArtifactUnavailable}, // two tags: ambiguous
		{"oci-layout:" + dir + ":v3", "1", nil, toolerr.ArtifactUnavailable},
		{"oci-layout:" + dir + ":v1", "2", nil, toolerr.ArtifactIntegrityFailed},
		{"oci-layout:" + filepath.Join(dir, "nope") + ":v1", "1", nil, toolerr.ArtifactUnavailable},
	} {
		m, err := o.Resolve(ctxT(t), ociRef(c.ref, "m.wasm", c.version))
		if c.code != "" {
			wantCode(t, err, c.code)
			continue
		}
		if err != nil || !bytes.Equal(m.Bytes, c.want) {
			t.Fatalf("%s: %v", c.ref, err)
		}
	}
	// Re-pushing a tag moves it; the index keeps one entry per tag.
	pushWasm(t, o, "oci-layout:"+dir+":v1", "1", artifact.PushModule{Title: "m.wasm", Wasm: counter})
	if m, err := o.Resolve(ctxT(t), ociRef("oci-layout:"+dir+":v1", "m.wasm", "1")); err != nil || !bytes.Equal(m.Bytes, counter) {
		t.Fatalf("moved layout tag: %v", err)
	}
	var idx struct{ Manifests []json.RawMessage }
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if json.Unmarshal(b, &idx); len(idx.Manifests) != 2 {
		t.Fatalf("index.json has %d manifests, want 2", len(idx.Manifests))
	}

	// A tampered blob in the layout is an integrity failure.
	p := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(v2.Layers[0].Digest, "sha256:"))
	bad := bytes.Clone(counter)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := o.Resolve(ctxT(t), ociRef(v2.Ref, "m.wasm", "2"))
	wantCode(t, err, toolerr.ArtifactIntegrityFailed)
	// Pull verifies every blob in place.
	_, err = o.Pull(ctxT(t), v2.Ref)
	wantCode(t, err, toolerr.ArtifactIntegrityFailed)
}

func TestDigestPinned(t *testing.T) {
	d := artifact.Digest([]byte("x"))
	for ref, want := range map[string]bool{
		"localhost:5000/a/b@" + d:                true,
		"localhost:5000/a/b:1.0@" + d:            true,
		"ghcr.io/acme/echo@" + d:                 true,
		"oci-layout:/tmp/l@" + d:                 true,
		"localhost:5000/a/b:1.0":                 false,
		"ghcr.io/acme/echo":                      false,
		"oci-layout:/tmp/l:v1":                   false,
		"oci-layout:/tmp/l":                      false,
		"a/b@sha256:short":                       false,
		"a/b@sha512:" + strings.Repeat("a", 128): true,
		"a/b@sha512:" + strings.Repeat("a", 64):  false,
		"":                                       false,
	} {
		if got := artifact.DigestPinned(ref); got != want {
			t.Errorf("DigestPinned(%q) = %v, want %v", ref, got, want)
		}
	}
}

func TestCacheDirRefused(t *testing.T) {
	host := registrytest.Host(registrytest.NewInMemory(t, nil))
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(dir) })
	_, err := o.Inspect(ctxT(t), host+"/a/b:1")
	wantCode(t, err, toolerr.ArtifactRefused)

	fresh := filepath.Join(t.TempDir(), "new", "cache")
	o = newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(fresh) })
	o.Inspect(ctxT(t), host+"/a/b:1") // not found; the cache is prepared anyway
	st, err := os.Stat(fresh)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
}

// TestCorruptCacheRefetched: a cached blob whose bytes no longer match its
// digest is never served; it is dropped and fetched again (with the
// registry down: artifact-unavailable, and the bad copy is gone).
func TestCorruptCacheRefetched(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	echo := fixture(t, "echo_reactor.wasm")
	a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
	cacheDir := filepath.Join(t.TempDir(), "cache")
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(cacheDir) })
	if _, err := o.Pull(ctxT(t), a.Ref); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(a.Layers[0].Digest, "sha256:"))
	bad := bytes.Clone(echo)
	bad[10] ^= 0xff
	if err := os.WriteFile(p, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	gets := f.Count(http.MethodGet, "/blobs/")
	m, err := o.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
	if err != nil || !bytes.Equal(m.Bytes, echo) {
		t.Fatalf("a corrupt cached blob must be dropped and fetched again: %v", err)
	}
	if f.Count(http.MethodGet, "/blobs/") != gets+1 {
		t.Fatal("the corrupt blob was not fetched again")
	}
	if err := os.WriteFile(p, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	f.Down(true)
	_, err = o.Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
	wantCode(t, err, toolerr.ArtifactUnavailable)
	if _, err := os.Stat(p); err == nil {
		t.Fatal("the corrupt blob is still in the cache")
	}
}

// TestOneHandshakePerRegistry: resolves of several repositories on one
// registry share one client (one /v2/ ping).
func TestOneHandshakePerRegistry(t *testing.T) {
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewInMemory(t, f))
	echo := fixture(t, "echo_reactor.wasm")
	p := newOCI(t, host, nil)
	for _, r := range []string{"a/one", "a/two", "b/three"} {
		pushWasm(t, p, host+"/"+r+":1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
	}
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithTagTTL(0) })
	pings := f.Count(http.MethodGet, "/v2/") - f.Count(http.MethodGet, "/v2/a") - f.Count(http.MethodGet, "/v2/b")
	for i := 0; i < 3; i++ {
		for _, r := range []string{"a/one", "a/two", "b/three"} {
			if _, err := o.Resolve(ctxT(t), ociRef(host+"/"+r+":1", "m.wasm", "1")); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := f.Count(http.MethodGet, "/v2/") - f.Count(http.MethodGet, "/v2/a") - f.Count(http.MethodGet, "/v2/b")
	if now-pings != 1 {
		t.Fatalf("%d registry handshakes for 9 resolves, want 1", now-pings)
	}
}

// TestCacheSharedAcrossProcesses runs several processes (this test binary
// in helper mode) that resolve the same artifact into one cache directory
// at the same time: each gets the right bytes and the cache stays valid.
func TestCacheSharedAcrossProcesses(t *testing.T) {
	if os.Getenv("ARTIFACT_HELPER_REF") != "" {
		t.Skip("helper mode")
	}
	host := registrytest.Host(registrytest.NewInMemory(t, nil))
	big := fixture(t, "go_echo_reactor.wasm")
	a := pushWasm(t, newOCI(t, host, nil), host+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: big})
	cacheDir := filepath.Join(t.TempDir(), "cache")
	var wg sync.WaitGroup
	outs := make([]string, 4)
	errs := make([]error, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperResolve$", "-test.count=1")
			cmd.Env = append(os.Environ(), "ARTIFACT_HELPER_REF="+a.Ref, "ARTIFACT_HELPER_HOST="+host, "ARTIFACT_HELPER_CACHE="+cacheDir)
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		}()
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil || !strings.Contains(outs[i], "digest="+a.Layers[0].Digest) {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	tmps, _ := os.ReadDir(filepath.Join(cacheDir, "tmp"))
	if len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
	b, err := os.ReadFile(filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(a.Layers[0].Digest, "sha256:")))
	if err != nil || !bytes.Equal(b, big) {
		t.Fatalf("cached blob: %v", err)
	}
}

// TestHelperResolve is the child of TestCacheSharedAcrossProcesses.
func TestHelperResolve(t *testing.T) {
	ref := os.Getenv("ARTIFACT_HELPER_REF")
	if ref == "" {
		t.Skip("only run by TestCacheSharedAcrossProcesses")
	}
	host := os.Getenv("ARTIFACT_HELPER_HOST")
	cache := os.Getenv("ARTIFACT_HELPER_CACHE")
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(cache) })
	m, err := o.Resolve(ctxT(t), ociRef(ref, "m.wasm", "1"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("digest=%s\n", m.Digest)
}

func TestAnchorLayout(t *testing.T) {
	for _, c := range [][3]string{
		{"oci-layout:l:v1", "/m", "oci-layout:/m/l:v1"},
		{"oci-layout:/abs:v1", "/m", "oci-layout:/abs:v1"},
		{"oci-layout:l", "", "oci-layout:l"},
		{"localhost:5000/a:1", "/m", "localhost:5000/a:1"},
	} {
		if got := artifact.AnchorLayout(c[0], c[1]); got != c[2] {
			t.Errorf("AnchorLayout(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
