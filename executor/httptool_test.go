package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

func httpToolManifest(t *testing.T, spec map[string]any, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"id": "test.http-tool", "description": "declarative HTTP tool", "version": "1.0.0",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"spec": spec,
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadHTTPTool(t *testing.T, e *executor.Executor, spec map[string]any, edit func(m map[string]any)) *executor.Tool {
	t.Helper()
	tool, err := e.Load(context.Background(), httpToolManifest(t, spec, edit))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { _ = tool.Close(context.Background()) })
	return tool
}

func TestDeclarativeHTTPToolEndToEnd(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		switch {
		case strings.HasPrefix(r.URL.Path, "/missing"):
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":"nope"}`)
			return
		case r.URL.Path == "/away":
			http.Redirect(w, r, "http://elsewhere.test"+strings.TrimPrefix(srvURL(r), "http://api.test")+"/", http.StatusFound)
			return
		case r.URL.Path == "/text":
			fmt.Fprint(w, "plain words")
			return
		case r.URL.Path == "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		out, _ := json.Marshal(map[string]any{
			"method": r.Method, "rawPath": r.URL.EscapedPath(), "rawQuery": r.URL.RawQuery,
			"auth": r.Header.Get("Authorization"), "accept": r.Header.Get("Accept"),
			"contentType": r.Header.Get("Content-Type"), "body": string(b),
		})
		w.Write(out)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	base := "http://api.test:" + port
	e := newExecutor(t, loopbackEgress)
	ctx := context.Background()
	cc := executor.CallContext{TenantID: "t", RunID: "r", Secrets: map[string]string{"API_KEY": "k3y"}}

	get := loadHTTPTool(t, e, map[string]any{
		"kind": "http", "method": "GET", "urlTemplate": base + "/users/{id}/items?q={q}&n={n}",
		"headers":       []map[string]any{{"name": "Accept", "value": "application/json"}},
		"authorization": map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "API_KEY", "name": "API_KEY"}},
	}, nil)
	if get.Style() != executor.HTTP {
		t.Fatalf("style %q", get.Style())
	}
	res, err := get.Invoke(ctx, executor.Request{Input: []byte(`{"id":"a b/../c","q":"x&y=z","n":3}`), Context: cc})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Egress) != 1 || !res.Egress[0].Allowed || res.Egress[0].Rule != base || strings.Contains(fmt.Sprint(res.Egress), "k3y") {
		t.Fatalf("audit %+v", res.Egress)
	}
	jsonEqual(t, res.Output, `{"method":"GET","rawPath":"/users/a%20b%2F..%2Fc/items","rawQuery":"q=x%26y%3Dz&n=3","auth":"Bearer k3y","accept":"application/json","contentType":"","body":""}`)

	// A missing placeholder value or secret fails before any request.
	before := hits.Load()
	_, err = get.Invoke(ctx, executor.Request{Input: []byte(`{"q":"x","n":1}`), Context: cc})
	wantCode(t, err, toolerr.InputValidationFailed)
	_, err = get.Invoke(ctx, executor.Request{Input: []byte(`{"id":"1","q":"x","n":1}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	te := wantCode(t, err, toolerr.InputValidationFailed)
	if te.Issues[0].Params["missingProperty"] != "API_KEY" {
		t.Fatalf("issues %+v", te.Issues)
	}
	if hits.Load() != before {
		t.Fatal("a request went out although the call was invalid")
	}

	post := loadHTTPTool(t, e, map[string]any{
		"kind": "http", "method": "POST", "urlTemplate": base + "/things",
		"requestBody": map[string]any{"kind": "json-input"},
	}, nil)
	res, err = post.Invoke(ctx, executor.Request{Input: []byte(`{"name":"x"}`), Context: cc})
	if err != nil {
		t.Fatal(err)
	}
	var echoed map[string]any
	_ = json.Unmarshal(res.Output, &echoed)
	if echoed["method"] != "POST" || echoed["contentType"] != "application/json" || echoed["body"] != `{"name":"x"}` || echoed["auth"] != "" {
		t.Fatalf("echo %v", echoed)
	}

	text := loadHTTPTool(t, e, map[string]any{
		"kind": "http", "method": "PUT", "urlTemplate": base + "/things/{id}",
		"requestBody": map[string]any{"kind": "text", "template": "hello {name}"},
	}, nil)
	res, err = text.Invoke(ctx, executor.Request{Input: []byte(`{"id":"7","name":"world"}`), Context: cc})
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(res.Output, &echoed)
	if echoed["body"] != "hello world" || echoed["rawPath"] != "/things/7" {
		t.Fatalf("echo %v", echoed)
	}

	raw := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/text", "parseJson": false}, nil)
	res, err = raw.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc})
	if err != nil || string(res.Output) != `"plain words"` {
		t.Fatalf("parseJson false: %s %v", res.Output, err)
	}

	missing := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/missing"}, nil)
	_, err = missing.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc})
	te = wantCode(t, err, toolerr.HandlerError)
	if te.Details["status"] != 404 {
		t.Fatalf("details %v", te.Details)
	}
	ok404 := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/missing", "successStatus": map[string]any{"min": 200, "max": 404}}, nil)
	if _, err := ok404.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc}); err != nil {
		t.Fatalf("successStatus 200-404: %v", err)
	}

	// With no network, the tool reaches only its template's origin: a
	// redirect elsewhere is refused.
	away := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/away"}, nil)
	_, err = away.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc})
	wantCode(t, err, toolerr.PolicyRefused)

	slow := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": base + "/slow", "timeoutMs": 200}, nil)
	start := time.Now()
	_, err = slow.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc})
	te = wantCode(t, err, toolerr.HandlerError)
	if te.Details["egress"] != "timeout" || time.Since(start) > 4*time.Second {
		t.Fatalf("timeoutMs: %v after %v", te.Details, time.Since(start))
	}
}

func srvURL(r *http.Request) string { return "http://" + r.Host }

func TestDeclarativeHTTPToolRefusedAtLoad(t *testing.T) {
	e := newExecutor(t)
	cases := []struct {
		name string
		spec map[string]any
		edit func(m map[string]any)
		want string
	}{
		{"placeholder in host", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://{tenant}.example.com/x"}, nil, "host or port"},
		{"placeholder in port", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://api.example.com:{port}/x"}, nil, "host or port"},
		{"placeholder in userinfo", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://{user}@api.example.com/x"}, nil, "userinfo"},
		{"placeholder in scheme", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "{scheme}://api.example.com/x"}, nil, "scheme"},
		{"unbalanced", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/{x"}, nil, "unterminated"},
		{"not http", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "ftp://api.example.com/x"}, nil, "scheme"},
		{"origin not in the allowlist", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/x"},
			withNetwork("allowlist", "other.example.com"), "not admitted"},
		{"network none", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/x"}, withNetwork("none"), "not admitted"},
		{"secret to unrestricted", map[string]any{"kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/x",
			"authorization": map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "K", "name": "K"}}}, withNetwork("unrestricted"), "allowlisted"},
	}
	for _, c := range cases {
		_, err := e.Load(context.Background(), httpToolManifest(t, c.spec, c.edit))
		te := wantCode(t, err, toolerr.InvalidToolDefinition)
		if !strings.Contains(te.Message, c.want) {
			t.Errorf("%s: message %q, want %q", c.name, te.Message, c.want)
		}
	}
}
