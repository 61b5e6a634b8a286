package egress

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Options.Trace is called once per admitted hop (a redirect hop too, a
// denied one never), its traceparent is the one the hop carries, its done
// gets the hop's status; a handler's own traceparent and tracestate are
// dropped with or without Trace.
func TestTraceHookPerHop(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Traceparent")+" "+r.Header.Get("Tracestate"))
		mu.Unlock()
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "/end", http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	_, port := hostPort(t, srv)
	pol, _ := ParsePolicy("allowlist", []string{"api.test:" + port})
	type hop struct {
		method, dest string
		status       int
		err          error
	}
	var hops []*hop
	opts := loopbackOptions()
	opts.Trace = func(method string, dest Origin) (string, func(int, error)) {
		h := &hop{method: method, dest: dest.String()}
		hops = append(hops, h)
		return fmt.Sprintf("00-%032x-%016x-01", 7, len(hops)), func(status int, err error) { h.status, h.err = status, err }
	}
	s := NewSession(pol, opts)
	defer s.Close()
	guestHdr := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "TraceState": "evil=1", "X-Ok": "1"}
	resp, err := s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/hop", Header: guestHdr})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp)
	_ = resp.Close()
	if _, err := s.Do(context.Background(), &Request{URL: "http://other.test:" + port + "/x"}); reasonOf(err) != ReasonDenied {
		t.Fatalf("unlisted: %v", err)
	}
	want := []string{
		"/hop 00-00000000000000000000000000000007-0000000000000001-01 ",
		"/end 00-00000000000000000000000000000007-0000000000000002-01 ",
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("server saw %q, want %q", seen, want)
	}
	if len(hops) != 2 || hops[0].status != 302 || hops[1].status != 200 || hops[0].method != "GET" || hops[0].dest != "http://api.test:"+port {
		t.Errorf("hops %+v %+v", hops[0], hops[len(hops)-1])
	}

	// Without Trace: no traceparent at all, the handler's dropped.
	seen = nil
	s2 := NewSession(pol, loopbackOptions())
	defer s2.Close()
	resp, err = s2.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/end", Header: guestHdr})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Close()
	if fmt.Sprint(seen) != "[/end  ]" {
		t.Errorf("without Trace the server saw %q", seen)
	}
}

// A hop that fails reaches done with status 0 and the session's error.
func TestTraceHookFailedHop(t *testing.T) {
	srv := httptest.NewServer(okHandler())
	_, port := hostPort(t, srv)
	srv.Close() // nothing listens: the dial fails
	pol, _ := ParsePolicy("allowlist", []string{"api.test:" + port})
	var status = -1
	var got error
	opts := loopbackOptions()
	opts.Trace = func(string, Origin) (string, func(int, error)) {
		return "", func(s int, err error) { status, got = s, err }
	}
	s := NewSession(pol, opts)
	defer s.Close()
	if _, err := s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/"}); err == nil {
		t.Fatal("no error")
	}
	if e, ok := got.(*Error); status != 0 || !ok || e.Reason == "" {
		t.Errorf("done(%d, %v)", status, got)
	}
}
