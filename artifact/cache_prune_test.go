package artifact_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// TestCachePrune: the cache lists its blobs by last use; prune evicts by
// age, then least recently used down to a size, and an evicted blob is
// fetched again on the next resolve.
func TestCachePrune(t *testing.T) {
	host := registrytest.Host(registrytest.NewInMemory(t, nil))
	dir := filepath.Join(t.TempDir(), "cache")
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "go_echo_reactor.wasm")
	push := newOCI(t, host, nil)
	a := pushWasm(t, push, host+"/a/small:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
	b := pushWasm(t, push, host+"/a/big:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: counter})
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(dir) })
	for _, ref := range []string{a.Ref, b.Ref} {
		if _, err := o.Resolve(ctxT(t), ociRef(ref, "m.wasm", "1")); err != nil {
			t.Fatal(err)
		}
	}
	// Per artifact: manifest, config, module.
	if list, err := artifact.CacheList(dir); err != nil || len(list) != 6 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// The big artifact's blobs were used 40 days ago.
	old := time.Now().Add(-40 * 24 * time.Hour)
	for _, d := range []string{b.Digest, b.Layers[0].Digest} {
		if err := os.Chtimes(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")), old, old); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := artifact.CachePrune(dir, 30*24*time.Hour, -1)
	if err != nil || len(removed) != 2 {
		t.Fatalf("prune by age removed %+v (%v), want the big artifact's manifest and module", removed, err)
	}
	// The size limit evicts the least recently used first, down to the limit.
	removed, err = artifact.CachePrune(dir, 0, 0)
	if err != nil || len(removed) == 0 {
		t.Fatalf("prune to 0 bytes: %v %v", removed, err)
	}
	if list, _ := artifact.CacheList(dir); len(list) != 0 {
		t.Fatalf("after prune to 0 bytes: %v", list)
	}
	if m, err := o.Resolve(ctxT(t), ociRef(b.Ref, "m.wasm", "1")); err != nil || m.Digest != b.Layers[0].Digest {
		t.Fatalf("resolve after eviction: %v", err)
	}
}
