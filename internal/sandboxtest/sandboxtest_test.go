package sandboxtest_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/limits"
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

// G01Schema is the 3 x 10^5 reference tree of issue 24, a fresh map each
// call; Zeros is the array of n zeros.
func TestG01Schema(t *testing.T) {
	s := sandboxtest.G01Schema()
	defs := s["$defs"].(map[string]any)
	if len(defs) != 6 || s["type"] != "array" || len(s["items"].(map[string]any)["allOf"].([]any)) != 3 {
		t.Fatalf("schema %v", s)
	}
	for k := 2; k <= 6; k++ {
		refs := defs[fmt.Sprintf("a%d", k)].(map[string]any)["allOf"].([]any)
		if len(refs) != 10 || refs[9].(map[string]any)["$ref"] != fmt.Sprintf("#/$defs/a%d", k-1) {
			t.Fatalf("a%d: %v", k, refs)
		}
	}
	delete(s, "$defs")
	if _, ok := sandboxtest.G01Schema()["$defs"]; !ok {
		t.Fatal("G01Schema shares its map between calls")
	}
	for n, want := range map[int]string{0: "[]", 1: "[0]", 3: "[0,0,0]"} {
		if got := sandboxtest.Zeros(n); got != want {
			t.Errorf("Zeros(%d) = %q, want %q", n, got, want)
		}
	}
	if n := len(sandboxtest.Zeros(100)); n != 201 {
		t.Errorf("Zeros(100) is %d bytes, want 201", n)
	}
}

// Timed counts what fn spent: a sleep is no work of its own (its thread's
// CPU time, next to nothing, where thread clocks exist), a spin of 20 ms
// of thread CPU is at least those 20 ms whatever the machine's load.
func TestTimed(t *testing.T) {
	d := sandboxtest.Timed(func() { time.Sleep(30 * time.Millisecond) })
	if limits.Supported() && d >= 15*time.Millisecond || !limits.Supported() && d < 30*time.Millisecond {
		t.Fatalf("a 30 ms sleep counts %v (thread clocks: %v)", d, limits.Supported())
	}
	if !limits.Supported() {
		return
	}
	d = sandboxtest.Timed(func() {
		c := limits.CurrentThread()
		for c0 := c.Now(); c.Now()-c0 < 20*time.Millisecond; {
		}
	})
	if d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("20 ms of thread CPU counts %v", d)
	}
}

// Buffer keeps every write of concurrent writers, and Bytes is a copy.
func TestBuffer(t *testing.T) {
	var b sandboxtest.Buffer
	sandboxtest.Hammer(t, 4, 100, func(g, _ int) { fmt.Fprintf(&b, "%d\n", g) })
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
	c := b.Bytes()
	c[0] = 'x'
	if b.String()[0] == 'x' || len(c) != len(b.String()) {
		t.Fatal("Bytes is not a copy of the contents")
	}
}
