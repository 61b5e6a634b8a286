package registrytest

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Faults wraps a registry handler and injects failures. The zero value
// passes every request through. Its methods are safe for concurrent use
// while the server runs.
type Faults struct {
	mu       sync.Mutex
	failN    int
	failCode int
	failPath string
	tamper   map[string]bool
	cut      map[string]int
	length   map[string]int64
	down     bool
	requests []string
}

// FailNext makes the next n requests whose path contains substr answer
// code (with a Retry-After of 0 for 429 and 503).
func (f *Faults) FailNext(n, code int, substr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failCode, f.failPath = n, code, substr
}

// Tamper flips a byte of the blob whose digest is d on every GET: the
// registry then serves bytes that do not match their digest.
func (f *Faults) Tamper(d string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tamper == nil {
		f.tamper = map[string]bool{}
	}
	f.tamper[d] = true
}

// Cut makes the next n GETs of blob d send only half of it and then drop
// the connection (an interrupted download).
func (f *Faults) Cut(d string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut == nil {
		f.cut = map[string]int{}
	}
	f.cut[d] = n
}

// ClaimLength makes GETs and HEADs of blob d announce Content-Length n
// while sending nothing (a registry lying about a huge blob).
func (f *Faults) ClaimLength(d string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.length == nil {
		f.length = map[string]int64{}
	}
	f.length[d] = n
}

// Down makes every request fail by closing the connection.
func (f *Faults) Down(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Requests returns "METHOD path" of every request seen so far.
func (f *Faults) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// Count returns how many requests had method and a path containing substr.
func (f *Faults) Count(method, substr string) int {
	n := 0
	for _, r := range f.Requests() {
		m, p, _ := strings.Cut(r, " ")
		if m == method && strings.Contains(p, substr) {
			n++
		}
	}
	return n
}

// Wrap returns next with the faults applied.
func (f *Faults) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path)
		down := f.down
		fail := f.failN > 0 && strings.Contains(r.URL.Path, f.failPath)
		code := f.failCode
		if fail {
			f.failN--
		}
		var blob string
		if i := strings.Index(r.URL.Path, "/blobs/sha"); i >= 0 && !strings.Contains(r.URL.Path, "/blobs/uploads") {
			blob = r.URL.Path[i+len("/blobs/"):]
		}
		tamper := blob != "" && f.tamper[blob]
		cut := blob != "" && r.Method == http.MethodGet && f.cut[blob] > 0
		if cut {
			f.cut[blob]--
		}
		claim, lie := f.length[blob]
		f.mu.Unlock()

		switch {
		case down:
			hijackClose(w)
			return
		case fail:
			if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "0")
			}
			http.Error(w, `{"errors":[{"code":"UNAVAILABLE","message":"injected failure"}]}`, code)
			return
		case blob != "" && lie:
			w.Header().Set("Content-Length", strconv.FormatInt(claim, 10))
			w.Header().Set("Docker-Content-Digest", blob)
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				if fl, ok := w.(http.Flusher); ok {
					fl.Flush()
				}
				hijackClose(w)
			}
			return
		case tamper || cut:
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			if rec.Code != http.StatusOK || len(body) == 0 {
				w.WriteHeader(rec.Code)
				_, _ = w.Write(body)
				return
			}
			if tamper {
				body = bytes.Clone(body)
				body[len(body)/2] ^= 0xff
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			if cut {
				_, _ = w.Write(body[:len(body)/2])
				if fl, ok := w.(http.Flusher); ok {
					fl.Flush()
				}
				hijackClose(w)
				return
			}
			_, _ = w.Write(body)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hijackClose drops the connection without a (complete) response.
func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// NewInMemory serves go-containerregistry's in-memory registry on a
// loopback port behind f (nil: no faults) and returns the server; its
// Listener address is the registry host. It is closed in t.Cleanup.
func NewInMemory(t testing.TB, f *Faults) *httptest.Server {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if f != nil {
		h = f.Wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// Host returns the "127.0.0.1:port" of an httptest server.
func Host(srv *httptest.Server) string {
	return strings.TrimPrefix(srv.URL, "http://")
}

// NewProxy serves a reverse proxy to the registry at host (such as a
// Registry started by Start) on a loopback port, with the faults of f
// applied. It is closed in t.Cleanup.
func NewProxy(t testing.TB, host string, f *Faults) *httptest.Server {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: host}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var h http.Handler = rp
	if f != nil {
		h = f.Wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
