package artifact_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// BenchmarkResolveExampleHandler measures resolving the bundled example
// handler (examples/echo/handler.wasm, ~3.4 MB) by digest from a real
// docker-registry on loopback:
//
//   - cold: a new resolver and an empty cache (handshake, manifest, blob download, verify, write)
//   - cached-new-resolver: a new resolver over a warm cache (what a fresh sandboxd process does)
//   - cached: the same resolver again
func BenchmarkResolveExampleHandler(b *testing.B) {
	reg := registrytest.Start(b)
	wasm, err := os.ReadFile(filepath.Join("..", "examples", "echo", "handler.wasm"))
	if err != nil {
		b.Fatal(err)
	}
	a := pushWasm(b, newOCI(b, reg.Host, nil), reg.Host+"/bench/echo:1", "1", artifact.PushModule{Title: "handler.wasm", Wasm: wasm})
	ref := ociRef(a.Ref, "handler.wasm", "1")
	resolve := func(b *testing.B, o *artifact.OCI) {
		m, err := o.Resolve(ctxT(b), ref)
		if err != nil || len(m.Bytes) != len(wasm) {
			b.Fatal(err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(wasm)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			o := newOCI(b, reg.Host, nil)
			b.StartTimer()
			resolve(b, o)
		}
	})
	warm := filepath.Join(b.TempDir(), "cache")
	withWarm := func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(warm) }
	resolve(b, newOCI(b, reg.Host, withWarm))
	b.Run("cached-new-resolver", func(b *testing.B) {
		b.SetBytes(int64(len(wasm)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			o := newOCI(b, reg.Host, withWarm)
			b.StartTimer()
			resolve(b, o)
		}
	})
	b.Run("cached", func(b *testing.B) {
		o := newOCI(b, reg.Host, withWarm)
		resolve(b, o)
		b.SetBytes(int64(len(wasm)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			resolve(b, o)
		}
	})
}
