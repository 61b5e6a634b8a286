package registrytest

import (
	"io"
	"net/http"
	"testing"
)

func TestStartServesAndStops(t *testing.T) {
	r := Start(t)
	resp, err := http.Get("http://" + r.Host + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/: %s", resp.Status)
	}
	r.Stop()
	r.Stop() // idempotent
	if resp, err := http.Get("http://" + r.Host + "/v2/"); err == nil {
		resp.Body.Close()
		t.Fatal("the registry still answers after Stop")
	}
}

func TestFaultsFailNextAndCount(t *testing.T) {
	f := &Faults{}
	srv := NewInMemory(t, f)
	f.FailNext(2, http.StatusServiceUnavailable, "/v2/")
	for i, want := range []int{503, 503, 200} {
		resp, err := http.Get(srv.URL + "/v2/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if n := f.Count(http.MethodGet, "/v2/"); n != 3 {
		t.Fatalf("Count = %d", n)
	}
	f.Down(true)
	if resp, err := http.Get(srv.URL + "/v2/"); err == nil {
		resp.Body.Close()
		t.Fatal("Down did not drop the connection")
	}
}
