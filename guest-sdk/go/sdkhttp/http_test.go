package sdkhttp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	req, _ := http.NewRequest("", "https://api.example.com/v1/x?q=1", strings.NewReader("body"))
	req.Header.Add("Accept", "application/json")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	req.Header.Set("Authorization", "Bearer "+SecretHeader("TOKEN"))
	b, err := describe(req)
	if err != nil {
		t.Fatal(err)
	}
	var got requestJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Method != "GET" || got.URL != "https://api.example.com/v1/x?q=1" ||
		got.Headers["X-Multi"] != "a, b" || got.Headers["Authorization"] != "Bearer {{secret:TOKEN}}" {
		t.Fatalf("describe = %s", b)
	}
}

func TestParseHeaders(t *testing.T) {
	h, cl := parseHeaders([]byte(`{"content-type":"application/json","content-length":"42"}`))
	if h.Get("Content-Type") != "application/json" || cl != 42 {
		t.Fatalf("headers %v, length %d", h, cl)
	}
	if _, cl := parseHeaders([]byte(`{"content-length":"-1"}`)); cl != -1 {
		t.Fatalf("negative length accepted: %d", cl)
	}
	if h, cl := parseHeaders([]byte(`not json`)); len(h) != 0 || cl != -1 {
		t.Fatalf("garbage: %v %d", h, cl)
	}
}
