package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
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
	var lastAuth atomic.Value
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
		if a := r.Header.Get("Authorization"); a != "" {
			lastAuth.Store(a)
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
	res, err := get.Invoke(ctx, executor.Request{Input: []byte(`{"id":"a b;c","q":"x&y=z","n":3}`), Context: cc})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Egress) != 1 || !res.Egress[0].Allowed || res.Egress[0].Rule != base || strings.Contains(fmt.Sprint(res.Egress), "k3y") {
		t.Fatalf("audit %+v", res.Egress)
	}
	jsonEqual(t, res.Output, `{"method":"GET","rawPath":"/users/a%20b%3Bc/items","rawQuery":"q=x%26y%3Dz&n=3","auth":"Bearer [REDACTED:API_KEY]","accept":"application/json","contentType":"","body":""}`)

	// The server got the token; its reflection came back redacted.
	if got := lastAuth.Load(); got != "Bearer k3y" {
		t.Fatalf("server saw Authorization %v", got)
	}
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

// F08: an upstream that answers 401 and echoes the request: the error's
// details.body excerpt, message and every other field carry the marker,
// never the bearer token; the upstream did receive it.
func TestF08HTTPToolErrorBody(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"API_KEY": f08Secret})
	})
	tool := loadHTTPTool(t, e, map[string]any{
		"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/status/{code}",
		"authorization": map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "API_KEY", "name": "API_KEY"}},
	}, func(m map[string]any) { m["limits"] = map[string]any{"memMB": 1, "cpuMs": 1000} })
	for _, code := range []string{"401", "200"} {
		res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"code":"` + code + `"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
		var all []byte
		if code == "401" {
			te := wantCode(t, err, toolerr.HandlerError)
			body, _ := te.Details["body"].(string)
			if !strings.Contains(body, `"Authorization":["Bearer [REDACTED:API_KEY]"]`) {
				t.Fatalf("details.body %q", body)
			}
			all, _ = json.Marshal(te)
			all = append(all, te.Error()...)
		} else {
			if err != nil {
				t.Fatal(err)
			}
			all = res.Output
			if !strings.Contains(string(all), "Bearer [REDACTED:API_KEY]") {
				t.Fatalf("output %s", all)
			}
		}
		all = append(all, fmt.Sprintf("%+v", res)...)
		if strings.Contains(string(all), "THIS-IS-THE") {
			t.Fatalf("status %s: the secret is in what the caller gets: %s", code, all)
		}
	}
}

// F10: placeholder values can never add, remove or climb path segments:
// dot segments in every spelling, separators encoded or not, empty values
// are input-validation-failed before any request; the server only ever
// sees the template's segments with the value inside its own.
func TestF10PathTraversal(t *testing.T) {
	srv, paths := echoServer(t)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"API_KEY": f08Secret})
	})
	tool := loadHTTPTool(t, e, map[string]any{
		"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/v1/users/{id}/profile",
		"authorization": map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "API_KEY", "name": "API_KEY"}},
	}, nil)
	two := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/a/{x}{y}/b/pre{z}"}, nil)
	call := func(tool *executor.Tool, in map[string]any) error {
		b, _ := json.Marshal(in)
		_, err := tool.Invoke(context.Background(), executor.Request{Input: b, Context: executor.CallContext{TenantID: "t", RunID: "r"}})
		return err
	}
	bad := []string{".", "..", "...", "%2e", "%2e%2e", "%2E%2e", ".%2E", "%252e%252e", "%25252e%25252e", "..;", "..;jsessionid=x", ". ", ".. ",
		"\uff0e\uff0e", "/", "a/b", "../admin", "%2f", "%2F", "a%2Fb", "%252f", "\\", "..\\admin", "%5c", "%5C..", "\uff0f", "", "a\u0000", "%00", "%c0%ae%c0%ae", "\u2025"}
	for _, v := range bad {
		err := call(tool, map[string]any{"id": v})
		te := wantCode(t, err, toolerr.InputValidationFailed)
		if len(te.Issues) != 1 || te.Issues[0].InstancePath != "/id" {
			t.Errorf("%q: issues %+v (%s)", v, te.Issues, te.Message)
		}
	}
	// Placeholders sharing a segment cannot build a dot segment together;
	// an empty value beside literal text keeps its segment.
	for _, in := range []map[string]any{{"x": ".", "y": ".", "z": "1"}, {"x": "%2e", "y": ".", "z": "1"}, {"x": "", "y": "", "z": "1"}} {
		wantCode(t, call(two, in), toolerr.InputValidationFailed)
	}
	select {
	case p := <-paths:
		t.Fatalf("a refused value reached the server: %s", p)
	default:
	}
	good := map[string]string{"42": "/v1/users/42/profile", "a.b": "/v1/users/a.b/profile", "..a": "/v1/users/..a/profile",
		"a b": "/v1/users/a%20b/profile", "100%": "/v1/users/100%25/profile", "x;y": "/v1/users/x%3By/profile", "é": "/v1/users/%C3%A9/profile"}
	for v, want := range good {
		if err := call(tool, map[string]any{"id": v}); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if got := <-paths; got != want {
			t.Errorf("%q: server saw %s, want %s", v, got, want)
		}
	}
	if err := call(two, map[string]any{"x": ".", "y": "a", "z": ""}); err != nil {
		t.Fatal(err)
	}
	if got := <-paths; got != "/a/.a/b/pre" {
		t.Errorf("server saw %s", got)
	}
}

// F11: a declarative HTTP tool's response body and output are charged to
// memMB: 30 MB from the upstream under memMB 16 is limits-exceeded memMB
// (the body streams into an account-checked buffer, never read whole), and
// the host's heap stays near the cap. Bodies that fit still work, and the
// parseJson false output (a JSON string) is charged too.
func TestF11HTTPToolBodyMemory(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithEgressLimits(egress.Limits{MaxBodyBytes: 64 << 20})
	})
	spec := func(parse bool) map[string]any {
		return map[string]any{"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/big?n={n}", "parseJson": parse}
	}
	mem := func(mb int) func(m map[string]any) {
		return func(m map[string]any) { m["limits"] = map[string]any{"memMB": mb, "cpuMs": 5000} }
	}
	tool := loadHTTPTool(t, e, spec(true), mem(16))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"30000000"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	te := wantCode(t, err, toolerr.LimitsExceeded)
	if te.Details["limit"] != "memMB" {
		t.Fatalf("details %v", te.Details)
	}
	allocMB := float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
	t.Logf("30 MB body, memMB 16: %s %v (host allocated %.1f MiB during the call)", te.Message, te.Details, allocMB)
	if allocMB > 16*1.25+32 {
		t.Fatalf("the host allocated %.1f MiB for a memMB 16 call", allocMB)
	}
	// 5 MB fits in 16 (buffer growth charged: 8 MiB + the old 4 MiB).
	res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"5000000"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 5000002 || res.Usage.PeakMemMB < 5 || res.Usage.PeakMemMB > 16 {
		t.Fatalf("output %d bytes, peakMemMB %v", len(res.Output), res.Usage.PeakMemMB)
	}
	t.Logf("5 MB body, memMB 16: peakMemMB %v", res.Usage.PeakMemMB)
	// parseJson false: the output (the body as a JSON string, here six
	// bytes per 0x01 byte) is charged beside the body: 2.5 MB of body fits
	// its 4 MiB buffer in memMB 16, its 15 MB JSON string does not.
	ctl := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/ctl?n={n}", "parseJson": false}, mem(16))
	_, err = ctl.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"2500000"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	if te := wantCode(t, err, toolerr.LimitsExceeded); !strings.Contains(te.Message, "output") {
		t.Fatalf("parseJson false, 2.5 MB of 0x01: %s", te.Message)
	}
	res, err = ctl.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"1000000"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	var str string
	if err := json.Unmarshal(res.Output, &str); err != nil || str != strings.Repeat("\x01", 1000000) || res.Usage.PeakMemMB < 6 {
		t.Fatalf("parseJson false output %.40s (peakMemMB %v): %v", res.Output, res.Usage.PeakMemMB, err)
	}
	t.Logf("1 MB of 0x01, parseJson false, memMB 16: output %d bytes, peakMemMB %v", len(res.Output), res.Usage.PeakMemMB)
}

// A declarative HTTP tool's host work on the response (issue 24) runs on
// the call's CPU clock with a check every 64 KiB: quoting a 64 MiB body
// (spec.parseJson false; 100+ ms of CPU here) under cpuMs 20 ends
// limits-exceeded cpuMs within stopBound of the budget, with the work in
// usage.cpuMs; checking it as JSON (parseJson true) the same. Before, both
// passes ran uncharged and uninterruptible, and only the output's
// validation after them could stop the call.
func TestHTTPToolHostWorkBounded(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithEgressLimits(egress.Limits{MaxBodyBytes: 128 << 20})
	})
	const cpuMs = 20
	for _, parse := range []bool{false, true} {
		tool := loadHTTPTool(t, e, map[string]any{"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/big?n={n}", "parseJson": parse},
			func(m map[string]any) { m["limits"] = map[string]any{"memMB": 512, "cpuMs": cpuMs} })
		n := "67108864"
		if parse {
			n = "100000000" // validJSON is faster than the quoting
		}
		res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"` + n + `"}`), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
		te := wantCode(t, err, toolerr.LimitsExceeded)
		obs, _ := te.Details["observed"].(int64)
		// Output validation would stop at cpuMs too (it gets what is
		// left): the stop must be the host work's, before it.
		if te.Details["limit"] != "cpuMs" || res == nil || !strings.Contains(te.Message, "the HTTP tool's host work") {
			t.Fatalf("parseJson %v: want limits-exceeded cpuMs with usage: %s %v %+v", parse, te.Message, te.Details, res)
		}
		t.Logf("parseJson %v: %s (usage.cpuMs %.1f)", parse, te.Message, res.Usage.CPUMs)
		if obs > cpuMs+stopBound || res.Usage.CPUMs < cpuMs {
			t.Errorf("parseJson %v: stopped at %d ms, usage.cpuMs %.1f; want within %d ms of cpuMs %d, charged", parse, obs, res.Usage.CPUMs, stopBound, cpuMs)
		}
	}
}
