package sandboxtest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// CacheDir is one existing directory for the whole binary.
func TestCacheDir(t *testing.T) {
	a := sandboxtest.CacheDir(t)
	if fi, err := os.Stat(a); err != nil || !fi.IsDir() {
		t.Fatalf("CacheDir %q: %v", a, err)
	}
	t.Run("sub", func(t *testing.T) {
		if b := sandboxtest.CacheDir(t); b != a {
			t.Fatalf("CacheDir = %q then %q", a, b)
		}
	})
}

// Fixture finds testdata/wasm at the module root and returns its bytes.
func TestFixture(t *testing.T) {
	p, b := sandboxtest.Fixture(t, "counter")
	if want := filepath.Join(sandboxtest.Root(t), "testdata", "wasm", "counter.wasm"); p != want || !filepath.IsAbs(p) {
		t.Fatalf("path %q, want %q", p, want)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("counter.wasm does not start with the Wasm magic: % x", b[:min(8, len(b))])
	}
}

// SkipShort skips exactly the guests over BigGuest, and only under -short.
func TestSkipShort(t *testing.T) {
	ran := map[int64]bool{}
	for _, size := range []int64{sandboxtest.BigGuest, sandboxtest.BigGuest + 1} {
		t.Run("", func(t *testing.T) {
			sandboxtest.SkipShort(t, "x", size)
			ran[size] = true
		})
	}
	if !ran[sandboxtest.BigGuest] || ran[sandboxtest.BigGuest+1] == testing.Short() {
		t.Fatalf("ran %v under -short=%v", ran, testing.Short())
	}
}

// Hammer calls fn n times on each of p goroutines, which all start before
// any finishes its first call.
func TestHammer(t *testing.T) {
	const p, n = 8, 50
	var calls [p]atomic.Int32
	var started sync.WaitGroup
	started.Add(p)
	var total atomic.Int32
	sandboxtest.Hammer(t, p, n, func(g, i int) {
		if i == 0 {
			started.Done()
			started.Wait() // deadlocks unless all p run at once
		}
		calls[g].Add(1)
		total.Add(1)
	})
	for g := range calls {
		if c := calls[g].Load(); c != n {
			t.Errorf("goroutine %d ran %d times, want %d", g, c, n)
		}
	}
	if total.Load() != p*n {
		t.Fatalf("%d calls, want %d", total.Load(), p*n)
	}
}
