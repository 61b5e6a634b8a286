package artifact_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newOCI(t testing.TB, host string, mod func(artifact.OCIConfig) artifact.OCIConfig) *artifact.OCI {
	t.Helper()
	cfg := artifact.NewOCIConfig().
		WithCacheDir(filepath.Join(t.TempDir(), "cache")).
		WithKeychain(authn.NewMultiKeychain()). // anonymous: never the host's docker config
		WithInsecureRegistries(host)
	if mod != nil {
		cfg = mod(cfg)
	}
	o, err := artifact.NewOCI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t testing.TB, err error, code toolerr.Code) *toolerr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if !errors.Is(err, code) {
		t.Fatalf("got %v, want code %s", err, code)
	}
	var te *toolerr.Error
	errors.As(err, &te)
	return te
}

// TestRealRegistryRoundTrip pushes a two-module artifact to a real
// docker-registry process, then resolves each module by tag and by digest,
// the second time with the registry stopped.
func TestRealRegistryRoundTrip(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	reg := registrytest.Start(t)
	ctx := ctxT(t)
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	o := newOCI(t, reg.Host, nil)
	art, err := o.Push(ctx, reg.Host+"/acme/pack:1.0.0", "20261129.1", []artifact.PushModule{
		{Title: "echo.wasm", Wasm: echo},
		{Title: "tools/counter.wasm", Wasm: counter},
	})
	if err != nil {
		t.Fatal(err)
	}
	if art.Ref != reg.Host+"/acme/pack@"+art.Digest {
		t.Fatalf("push returned ref %q (digest %s)", art.Ref, art.Digest)
	}

	// A fresh resolver with an empty cache pulls by tag.
	puller := newOCI(t, reg.Host, nil)
	for _, c := range []struct {
		path string
		want []byte
	}{{"echo.wasm", echo}, {"tools/counter.wasm", counter}} {
		m, err := puller.Resolve(ctx, artifact.Ref{Kind: artifact.KindOCI, ImageRef: reg.Host + "/acme/pack:1.0.0", ModulePath: c.path, ArtifactVersion: "20261129.1"})
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if string(m.Bytes) != string(c.want) || m.Digest != artifact.Digest(c.want) {
			t.Fatalf("%s: wrong bytes (digest %s)", c.path, m.Digest)
		}
		if m.Source != art.Ref+"#"+c.path {
			t.Fatalf("source %q", m.Source)
		}
	}

	insp, err := puller.Inspect(ctx, reg.Host+"/acme/pack:1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if insp.Digest != art.Digest || insp.Version != "20261129.1" || insp.Layout != artifact.LayoutWasm ||
		insp.ConfigMediaType != artifact.MediaTypeWasmConfig || len(insp.Modules()) != 2 {
		t.Fatalf("inspect: %+v", insp)
	}

	// Digest-pinned and cached: resolves with the registry down.
	reg.Stop()
	m, err := puller.Resolve(ctx, artifact.Ref{Kind: artifact.KindOCI, ImageRef: art.Ref, ModulePath: "echo.wasm", ArtifactVersion: "20261129.1"})
	if err != nil {
		t.Fatalf("cached pinned ref with the registry down: %v", err)
	}
	if m.Digest != artifact.Digest(echo) {
		t.Fatal("wrong module from the cache")
	}
	// A tag must be re-resolved once its TTL has passed: with the registry
	// down that is artifact-unavailable.
	down := newOCI(t, reg.Host, nil)
	_, err = down.Resolve(ctx, artifact.Ref{Kind: artifact.KindOCI, ImageRef: reg.Host + "/acme/pack:1.0.0", ModulePath: "echo.wasm", ArtifactVersion: "20261129.1"})
	wantCode(t, err, toolerr.ArtifactUnavailable)
}

// TestRealRegistryFaults puts a fault-injecting proxy in front of a real
// docker-registry: 5xx answers are retried, a tampered blob is refused, an
// interrupted download is restarted.
func TestRealRegistryFaults(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	reg := registrytest.Start(t)
	f := &registrytest.Faults{}
	host := registrytest.Host(registrytest.NewProxy(t, reg.Host, f))
	wasm := fixture(t, "go_echo_reactor.wasm")
	a := pushWasm(t, newOCI(t, reg.Host, nil), reg.Host+"/acme/faults:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: wasm})
	ref := ociRef(host+"/acme/faults@"+a.Digest, "m.wasm", "1")

	f.FailNext(2, 503, "/blobs/")
	if m, err := newOCI(t, host, nil).Resolve(ctxT(t), ref); err != nil || m.Digest != a.Layers[0].Digest {
		t.Fatalf("503 twice, then success: %v", err)
	}
	f.Cut(a.Layers[0].Digest, 1)
	if _, err := newOCI(t, host, nil).Resolve(ctxT(t), ref); err != nil {
		t.Fatalf("one interrupted download: %v", err)
	}
	f.Tamper(a.Layers[0].Digest)
	_, err := newOCI(t, host, nil).Resolve(ctxT(t), ref)
	wantCode(t, err, toolerr.ArtifactIntegrityFailed)
}
