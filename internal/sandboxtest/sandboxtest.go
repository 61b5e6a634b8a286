// Package sandboxtest is what sandboxd's tests share: the -short policy for
// big guests, the fixture path, one compile-cache directory per test binary,
// a hammer helper, the G01 validation bomb with its timing and the
// per-tenant fairness harness (Paced, StartFlood, Attempts). It imports
// no sandboxd package but limits (a leaf: the thread CPU clock), so
// internal tests (package executor, package manifest) can use it as well as
// external ones.
package sandboxtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// BigGuest is the size over which -short skips a guest: a standard-Go build
// (the bundled example, the sample pack's echo, checks_reactor) compiles for
// seconds, so the tests that load one run only in the full (CI) run.
const BigGuest = 1 << 20

var cache struct {
	mu  sync.Mutex
	dir string
}

// Main runs m, then removes the shared compile cache, and exits with m's
// code. Call it from the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	cache.mu.Lock()
	if cache.dir != "" {
		os.RemoveAll(cache.dir)
	}
	cache.mu.Unlock()
	os.Exit(code)
}

// CacheDir returns the compile-cache directory every test of the binary
// shares, so each module compiles once per run. It is made on first use and
// removed by Main.
func CacheDir(t testing.TB) string {
	t.Helper()
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.dir == "" {
		d, err := os.MkdirTemp("", "sandboxd-test-cache-")
		if err != nil {
			t.Fatal(err)
		}
		cache.dir = d
	}
	return cache.dir
}

// SkipShort skips t under -short when the guest it loads (named name, for
// the message) is over BigGuest bytes. Every fixture loaded through Fixture
// passes here; tests that load a guest from elsewhere call it themselves.
func SkipShort(t testing.TB, name string, size int64) {
	t.Helper()
	if testing.Short() && size > BigGuest {
		t.Skip("-short: loads a guest over 1 MiB (" + name + ", a standard-Go build or the like); compiling it takes seconds")
	}
}

// Fixture returns the absolute path and the bytes of the built test module
// testdata/wasm/NAME.wasm at the module root (FixturePath), skipping t under
// -short when it is over BigGuest.
func Fixture(t testing.TB, name string) (path string, wasm []byte) {
	t.Helper()
	p := FixturePath(t, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return p, b
}

// FixturePath is Fixture without reading the module: the absolute path of
// testdata/wasm/NAME.wasm, skipping t under -short when it is over BigGuest
// (see SkipShort). A missing fixture fails t with a hint to run make wasm.
func FixturePath(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Root(t), "testdata", "wasm", name+".wasm")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("fixture %s: %v (run make wasm)", name, err)
	}
	SkipShort(t, name, fi.Size())
	return p
}

var root struct {
	once sync.Once
	dir  string
	err  error
}

// Root returns the sandboxd module's root directory: the nearest directory
// above the working directory (a test's package directory) whose go.mod
// declares module github.com/sandboxd/sandboxd.
func Root(t testing.TB) string {
	t.Helper()
	root.once.Do(func() {
		d, err := os.Getwd()
		if err != nil {
			root.err = err
			return
		}
		for {
			b, err := os.ReadFile(filepath.Join(d, "go.mod"))
			if err == nil && bytes.HasPrefix(b, []byte("module github.com/sandboxd/sandboxd\n")) {
				root.dir = d
				return
			}
			up := filepath.Dir(d)
			if up == d {
				root.err = fmt.Errorf("no go.mod of module github.com/sandboxd/sandboxd above the working directory")
				return
			}
			d = up
		}
	})
	if root.err != nil {
		t.Fatal(root.err)
	}
	return root.dir
}

// Hammer runs fn(g, i) for i in [0, n) on each of p goroutines g, released
// together so they contend from the first call, with GOMAXPROCS raised to
// at least p/2 for the run (restored after). It returns when all are done.
// fn reports failures with t.Error (never t.Fatal, which must not be called
// off the test goroutine).
func Hammer(t testing.TB, p, n int, fn func(g, i int)) {
	t.Helper()
	if procs := p / 2; procs > runtime.GOMAXPROCS(0) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range n {
				fn(g, i)
			}
		}()
	}
	close(start)
	wg.Wait()
}
