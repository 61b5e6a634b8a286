package egress

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLiteralHeaderNeverSubstituted: a Request.Literal header goes out as
// written even when it spells a declared secret's placeholder, also when it
// overwrites a placeholder-holding entry of the same canonical name; the
// other headers are substituted as before.
func TestLiteralHeaderNeverSubstituted(t *testing.T) {
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		fmt.Fprint(w, "{}")
	}))
	defer srv.Close()
	_, port := hostPort(t, srv)
	pol, _ := ParsePolicy("allowlist", []string{"api.test:" + port})
	o := loopbackOptions()
	o.Secret = func(n string) (string, bool) { return "t0ken", n == "TOKEN" }
	s := NewSession(pol, o)
	defer s.Close()
	marker := SecretPlaceholder("TOKEN")
	r, err := s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/", Header: map[string]string{
		"Authorization": "Bearer " + marker, "X-Note": "see " + marker, "X-Dup": marker, "x-dup": marker,
	}, Literal: map[string]bool{"X-Note": true, "x-dup": true}})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	h := <-got
	if h.Get("Authorization") != "Bearer t0ken" || h.Get("X-Note") != "see "+marker || len(h.Values("X-Dup")) != 1 || h.Get("X-Dup") != marker {
		t.Fatalf("server saw %v", h)
	}
}
