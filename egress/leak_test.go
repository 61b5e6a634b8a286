package egress

import (
	"context"
	"io"
	"net/http"
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

// Closing a response aborts a Read blocked on a body that never arrives.
func TestCloseAbortsBlockedRead(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("{"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	pol, _ := ParsePolicy("allowlist", []string{"127.0.0.1:*"})
	s := NewSession(pol, loopbackOptions())
	defer s.Close()
	r, err := s.Do(context.Background(), &Request{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); done <- err }()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	go func() { _ = r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked behind a Read")
	}
	if err := <-done; err == nil {
		t.Fatal("the blocked Read returned no error")
	}
}
