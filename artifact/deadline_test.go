package artifact_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// hangingRegistry serves the in-memory registry on loopback, except that
// requests whose path contains hang are held: with length > 0 the answer
// starts (headers announcing length bytes, and the first four) and then
// stops; otherwise nothing is sent. Held requests are released when the test ends.
func hangingRegistry(t *testing.T, hang string, length int) (host string, target string) {
	t.Helper()
	inner := registrytest.NewInMemory(t, nil)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang == "" || !strings.Contains(r.URL.Path, hang) || r.Method != http.MethodGet {
			inner.Config.Handler.ServeHTTP(w, r)
			return
		}
		if length > 0 {
			w.Header().Set("Content-Length", strconv.Itoa(length))
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("\x00asm"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return registrytest.Host(srv), registrytest.Host(inner)
}

// TestRegistryRequestDeadlines: a registry that stops answering fails the
// step it hung in with deadline-exceeded, naming the step, within the
// per-request deadline — however long the caller's own deadline is.
func TestRegistryRequestDeadlines(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	echo := fixture(t, "go_echo_reactor.wasm")
	layer := artifact.Digest(echo)
	timeout := time.Second
	if testing.Short() {
		timeout = 300 * time.Millisecond // each case waits it out
	}
	for _, c := range []struct {
		name   string
		hang   string
		length int
		step   string
	}{
		{"blob GET stalls mid-body", "/blobs/" + layer, len(echo), "GET blob " + layer},
		{"blob GET never answers", "/blobs/" + layer, 0, "GET blob " + layer},
		{"manifest GET never answers", "/manifests/", 0, "GET manifest"},
		{"handshake never answers", "/v2/", 0, "auth handshake"},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, target := hangingRegistry(t, c.hang, c.length)
			a := pushWasm(t, newOCI(t, target, nil), target+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
			o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithRequestTimeout(timeout) })
			start := time.Now()
			_, err := o.Resolve(ctxT(t), ociRef(host+"/a/b@"+a.Digest, "m.wasm", "1"))
			el := time.Since(start)
			te := wantCode(t, err, toolerr.DeadlineExceeded)
			if !strings.Contains(te.Message, c.step) || !strings.Contains(te.Message, "timed out") {
				t.Fatalf("message does not name the step %q: %q", c.step, te.Message)
			}
			t.Logf("failed after %s: %s", el.Round(time.Millisecond), te.Message)
			if el > 10*time.Second {
				t.Fatalf("took %s with a %s request timeout", el, timeout)
			}
		})
	}

	t.Run("caller deadline names the step", func(t *testing.T) {
		host, target := hangingRegistry(t, "/blobs/"+layer, len(echo))
		a := pushWasm(t, newOCI(t, target, nil), target+"/a/b:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: echo})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := newOCI(t, host, nil).Resolve(ctx, ociRef(host+"/a/b@"+a.Digest, "m.wasm", "1"))
		te := wantCode(t, err, toolerr.DeadlineExceeded)
		if !strings.Contains(te.Message, layer) {
			t.Fatalf("message does not name the blob: %q", te.Message)
		}
	})
}

// TestPullConcurrentBounded: a pull fetches its blobs concurrently, never
// more at once than the configured concurrency.
func TestPullConcurrentBounded(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	inner := registrytest.NewInMemory(t, nil)
	var mu sync.Mutex
	var inFlight, most int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := registrytest.Host(srv)
	echo := fixture(t, "echo_reactor.wasm")
	var mods []artifact.PushModule
	for i := 0; i < 8; i++ {
		// A custom section makes each module's bytes (and digest) distinct.
		m := append(append([]byte(nil), echo...), 0, 2, 1, byte('a'+i))
		mods = append(mods, artifact.PushModule{Title: fmt.Sprintf("m%d.wasm", i), Wasm: m})
	}
	a := pushWasm(t, newOCI(t, registrytest.Host(inner), nil), registrytest.Host(inner)+"/a/many:1", "1", mods...)
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithConcurrency(3) })
	start := time.Now()
	if _, err := o.Pull(ctxT(t), host+"/a/many@"+a.Digest); err != nil {
		t.Fatal(err)
	}
	t.Logf("9 blobs (150 ms each at the registry) in %s, at most %d at once", time.Since(start).Round(time.Millisecond), most)
	if most > 3 || most < 2 {
		t.Fatalf("at most %d blob GETs at once, want 2..3 (concurrency 3)", most)
	}
}
