package executor_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// TestHTTPToolKindgiBodyRules is Kindgi's own http tool tests
// (kindgi/kindgi-sdk packages/tools/tests/http.test.ts, "request body
// strategies") and the rest of its buildBody rules as a table, against a
// loopback server that records what arrived: a GET without requestBody
// sends nothing; any other method without requestBody, and json-input,
// send the input minus the keys urlTemplate consumed as application/json,
// nothing (and no Content-Type) when no key is left; input-passthrough
// sends the whole input; text fills its template unencoded as text/plain;
// a Content-Type in the spec's headers is the only one sent.
func TestHTTPToolKindgiBodyRules(t *testing.T) {
	type seen struct {
		Method string   `json:"method"`
		Path   string   `json:"path"`
		Body   string   `json:"body"`
		CT     []string `json:"ct"`
		Length int64    `json:"length"`
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		out, _ := json.Marshal(seen{Method: r.Method, Path: r.URL.EscapedPath(), Body: string(b), CT: r.Header.Values("Content-Type"), Length: r.ContentLength})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	base := "http://api.test:" + serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	cases := []struct {
		name, method, url string
		body              map[string]any // spec.requestBody, nil for none
		headers           []map[string]any
		input             string
		wantBody          string
		wantCT            []string // nil: no Content-Type
	}{
		// Kindgi's http.test.ts:
		{name: "POST with default json-input body strips URL-consumed keys", method: "POST", url: "/repos/{owner}/{repo}/issues",
			input: `{"owner":"a","repo":"b","title":"hi","body":"first!"}`, wantBody: `{"title":"hi","body":"first!"}`, wantCT: []string{"application/json"}},
		{name: "input-passthrough sends the entire input including URL-consumed keys", method: "POST", url: "/{owner}/{repo}", body: map[string]any{"kind": "input-passthrough"},
			input: `{"owner":"a","repo":"b"}`, wantBody: `{"owner":"a","repo":"b"}`, wantCT: []string{"application/json"}},
		{name: "GET does not send a body by default", method: "GET", url: "/repos/{owner}/{repo}/issues/{number}",
			input: `{"owner":"a","repo":"b","number":1}`},
		// The rest of buildBody's rules (research: http.ts, http-tools.mdx):
		{name: "GET with leftover keys still sends nothing", method: "GET", url: "/items/{id}", input: `{"id":"1","extra":true}`},
		{name: "DELETE sends the unconsumed keys", method: "DELETE", url: "/items/{id}",
			input: `{"id":"7","reason":"dup"}`, wantBody: `{"reason":"dup"}`, wantCT: []string{"application/json"}},
		{name: "PUT with every key consumed: empty body, no Content-Type", method: "PUT", url: "/items/{id}", input: `{"id":"7"}`},
		{name: "POST of an empty input: empty body, no Content-Type", method: "POST", url: "/items", input: `{}`},
		{name: "explicit json-input, every key consumed", method: "PATCH", url: "/items/{id}", body: map[string]any{"kind": "json-input"}, input: `{"id":"7"}`},
		{name: "json-input keeps the input's key order and compacts", method: "PATCH", url: "/items/{id}", body: map[string]any{"kind": "json-input"},
			input: `{"z": 1, "id":"7", "a": {"b": [1, 2.50]}, "s":"<&>"}`, wantBody: `{"z":1,"a":{"b":[1,2.50]},"s":"<&>"}`, wantCT: []string{"application/json"}},
		{name: "query placeholders consume keys too", method: "POST", url: "/search?q={q}",
			input: `{"q":"x y","limit":5}`, wantBody: `{"limit":5}`, wantCT: []string{"application/json"}},
		{name: "json-input on a GET sends the body", method: "GET", url: "/items/{id}", body: map[string]any{"kind": "json-input"},
			input: `{"id":"1","x":2}`, wantBody: `{"x":2}`, wantCT: []string{"application/json"}},
		{name: "text: unencoded, a missing key stays, null is empty", method: "PUT", url: "/notes/{id}", body: map[string]any{"kind": "text", "template": "hello {name}, {missing}, [{nothing}] #{id}"},
			input: `{"id":"9","name":"wörld & <x>/?","nothing":null}`, wantBody: "hello wörld & <x>/?, {missing}, [] #9", wantCT: []string{"text/plain"}},
		{name: "the spec's Content-Type wins", method: "POST", url: "/items", headers: []map[string]any{{"name": "Content-Type", "value": "application/vnd.api+json"}},
			input: `{"a":1}`, wantBody: `{"a":1}`, wantCT: []string{"application/vnd.api+json"}},
		{name: "the spec's content-type in any case is the only one", method: "POST", url: "/items", body: map[string]any{"kind": "text", "template": "x"},
			headers: []map[string]any{{"name": "content-type", "value": "text/csv"}}, input: `{}`, wantBody: "x", wantCT: []string{"text/csv"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := map[string]any{"kind": "http", "method": c.method, "urlTemplate": base + c.url}
			if c.body != nil {
				spec["requestBody"] = c.body
			}
			if c.headers != nil {
				spec["headers"] = c.headers
			}
			tool := loadHTTPTool(t, e, spec, nil)
			res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(c.input), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
			if err != nil {
				t.Fatal(err)
			}
			var got seen
			if err := json.Unmarshal(res.Output, &got); err != nil {
				t.Fatalf("output %s: %v", res.Output, err)
			}
			if got.Method != c.method || got.Body != c.wantBody || !slices.Equal(got.CT, c.wantCT) {
				t.Fatalf("server saw %s %s body %q Content-Type %q; want body %q Content-Type %q", got.Method, got.Path, got.Body, got.CT, c.wantBody, c.wantCT)
			}
			if c.wantBody == "" && got.Length > 0 {
				t.Fatalf("Content-Length %d for no body", got.Length)
			}
		})
	}
}
