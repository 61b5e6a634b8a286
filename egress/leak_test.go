package egress

import (
	"context"
	"io"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// A closed session leaves no connections or goroutines behind, including
// responses the caller never closed.
func TestSessionCloseLeaksNothing(t *testing.T) {
	srv := httptest.NewServer(okHandler())
	defer srv.Close()
	pol, _ := ParsePolicy("allowlist", []string{"127.0.0.1:*"})
	// Warm up the server side so its goroutines are in the baseline.
	warm := NewSession(pol, loopbackOptions())
	r, err := warm.Do(context.Background(), &Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	warm.Close()
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()
	for range 5 {
		s := NewSession(pol, loopbackOptions())
		for range 3 {
			r, err := s.Do(context.Background(), &Request{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadAll(r) // left open on purpose
		}
		s.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines, baseline %d:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
