package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// testResolver resolves every *.test name to 127.0.0.1 without DNS.
type testResolver struct{}

func (testResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopbackEgress lets guests reach loopback test servers as an operator
// would: --egress-allow-cidr 127.0.0.0/8, and *.test names on 127.0.0.1.
func loopbackEgress(c executor.Config) executor.Config {
	return c.WithEgressAllowCIDRs(netip.MustParsePrefix("127.0.0.0/8")).WithEgressResolver(testResolver{})
}

func withNetwork(kind string, hosts ...string) func(m map[string]any) {
	return func(m map[string]any) {
		n := map[string]any{"kind": kind}
		if kind == "allowlist" {
			n["hosts"] = hosts
		}
		m["network"] = n
	}
}

func serverPort(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func fetchInput(url string, headers map[string]string) string {
	b, _ := json.Marshal(map[string]any{"url": url, "headers": headers})
	return string(b)
}

// A Go handler fetches JSON through net/http and sdkhttp.Transport from an
// allowlisted loopback server; the same request to a name that is not
// listed is denied, and so is every request under network none.
func TestGuestFetchesFromAllowlistedServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"items":[1,2,3],"path":%q,"host":%q}`, r.URL.Path, r.Host)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	tool := load(t, e, "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port))

	res, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/v1/items", nil))
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"status":200,"contentType":"application/json","json":{"items":[1,2,3],"path":"/v1/items","host":"api.test:`+port+`"}}`)

	if len(res.Egress) != 1 || !res.Egress[0].Allowed || res.Egress[0].Rule != "api.test:"+port ||
		res.Egress[0].Address != "127.0.0.1:"+port || res.Egress[0].Status != 200 || res.Egress[0].ResponseBytes == 0 {
		t.Fatalf("audit %+v", res.Egress)
	}

	res, err = invoke(t, tool, fetchInput("http://other.test:"+port+"/v1/items", nil))
	te := wantCode(t, err, toolerr.HandlerError)
	if res == nil || len(res.Egress) != 1 || res.Egress[0].Allowed || !strings.Contains(res.Egress[0].Reason, "no network.hosts entry") {
		t.Fatalf("audit of the denied call: %+v", res)
	}
	if te.Details["handlerCode"] != "egress-denied" || !strings.Contains(te.Message, "not allowed by the tool's network policy") {
		t.Fatalf("unlisted host: %v %v", te.Details, te.Message)
	}
	_, err = invoke(t, tool, fetchInput("http://127.0.0.1:"+port+"/", nil))
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-denied" {
		t.Fatalf("IP literal against a hostname entry: %v", te.Details)
	}

	none := load(t, e, "http_fetch_reactor", withNetwork("none"))
	_, err = invoke(t, none, fetchInput("http://api.test:"+port+"/v1/items", nil))
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-denied" {
		t.Fatalf("network none: %v", te.Details)
	}
	// Absent network is none.
	absent := load(t, e, "http_fetch_reactor", nil)
	_, err = invoke(t, absent, fetchInput("http://api.test:"+port+"/", nil))
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-denied" {
		t.Fatalf("no network: %v", te.Details)
	}
}

// Without the operator's allow-range, a listed name that resolves to
// loopback is still denied.
func TestGuestLoopbackNeedsOperatorRange(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") }))
	defer srv.Close()
	port := serverPort(t, srv)
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithEgressResolver(testResolver{}) })
	tool := load(t, e, "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port))
	_, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/", nil))
	te := wantCode(t, err, toolerr.HandlerError)
	if te.Details["handlerCode"] != "egress-denied" || !strings.Contains(te.Message, "127.0.0.1 (loopback)") {
		t.Fatalf("loopback without allow-range: %v %s", te.Details, te.Message)
	}
}

func TestInvalidNetworkEntryRefusedAtLoad(t *testing.T) {
	e := newExecutor(t)
	_, err := e.Load(context.Background(), manifestFor(t, "http_fetch_reactor", withNetwork("allowlist", "api.example.com", "http://user@evil.example")))
	te := wantCode(t, err, toolerr.InvalidToolDefinition)
	if !strings.Contains(te.Message, `network.hosts[1] "http://user@evil.example"`) || te.Details["pointer"] != "/network/hosts/1" {
		t.Fatalf("message %q details %v", te.Message, te.Details)
	}
}

// Under strict the guest cannot read a secret, but a header placeholder is
// substituted by the host for an allowlisted destination.
func TestStrictSecretHeaderSubstitution(t *testing.T) {
	seen := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"API_TOKEN": "from-operator", "UNDECLARED": "nope"})
	})
	tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		withNetwork("allowlist", "api.test:"+port)(m)
		m["sandbox"] = "strict"
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"API_TOKEN": map[string]any{"type": "string"}}}
	})
	res, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/", map[string]string{"Authorization": "Bearer {{secret:API_TOKEN}}"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "Bearer from-operator" {
		t.Fatalf("server saw %q", got)
	}
	if strings.Contains(string(res.Output), "from-operator") {
		t.Fatal("the secret reached the output")
	}
	// An undeclared name is never looked up, even if the operator has it.
	_, err = invoke(t, tool, fetchInput("http://api.test:"+port+"/", map[string]string{"Authorization": "{{secret:UNDECLARED}}"}))
	te := wantCode(t, err, toolerr.HandlerError)
	if te.Details["handlerCode"] != "egress-not-found" || strings.Contains(te.Message, "nope") {
		t.Fatalf("undeclared secret: %v %s", te.Details, te.Message)
	}
	// The call context's value wins over the operator's.
	_, err = tool.Invoke(context.Background(), executor.Request{
		Input:   []byte(fetchInput("http://api.test:"+port+"/", map[string]string{"Authorization": "{{secret:API_TOKEN}}"})),
		Context: executor.CallContext{TenantID: "t", RunID: "r", Secrets: map[string]string{"API_TOKEN": "from-ctx"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "from-ctx" {
		t.Fatalf("server saw %q", got)
	}
}

// Time blocked in the HTTP import is not CPU time; cancelling the call or
// passing its deadline aborts the request at once.
func TestGuestRequestBlockingAndCancellation(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, `{"slow":true}`)
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		withNetwork("allowlist", "api.test:"+port)(m)
		m["limits"] = map[string]any{"memMB": 64, "cpuMs": 1000}
	})

	res, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/slow", nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.WallMs < 1500 || res.Usage.CPUMs >= 1000 {
		t.Fatalf("usage %+v: blocked time was charged as CPU", res.Usage)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err = tool.Invoke(ctx, executor.Request{Input: []byte(fetchInput("http://api.test:"+port+"/hang", nil)), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	wantCode(t, err, toolerr.Cancelled)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancellation took %v", d)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = tool.Invoke(ctx, executor.Request{Input: []byte(fetchInput("http://api.test:"+port+"/hang", nil)), Context: executor.CallContext{TenantID: "t", RunID: "r"}})
	wantCode(t, err, toolerr.DeadlineExceeded)
}

// secret_get: declared secrets from the call context or the operator;
// refused under strict; declared secrets are checked before the guest runs.
func TestSecretGetAndChecks(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"OP_ONLY": "operator-value", "UNDECLARED": "x"})
	})
	secrets := map[string]any{
		"TOKEN":   map[string]any{"type": "string", "minLength": 8},
		"OP_ONLY": map[string]any{"type": "string"},
	}
	tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		m["needsSpec"] = map[string]any{"secrets": secrets}
	})
	call := func(tool *executor.Tool, name string, given map[string]string) (*executor.Result, error) {
		return tool.Invoke(context.Background(), executor.Request{
			Input:   []byte(`{"secret":"` + name + `"}`),
			Context: executor.CallContext{TenantID: "t", RunID: "r", Secrets: given},
		})
	}
	res, err := call(tool, "TOKEN", map[string]string{"TOKEN": "ctx-value-1"})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"status":0,"contentType":"","secret":"ctx-value-1"}`)
	res, err = call(tool, "OP_ONLY", map[string]string{"TOKEN": "ctx-value-1"})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"status":0,"contentType":"","secret":"operator-value"}`)
	_, err = call(tool, "UNDECLARED", map[string]string{"TOKEN": "ctx-value-1", "UNDECLARED": "y"})
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-not-found" {
		t.Fatalf("undeclared: %v", te.Details)
	}

	// Missing and invalid values fail before the guest runs, without the value.
	_, err = call(tool, "TOKEN", nil)
	te := wantCode(t, err, toolerr.InputValidationFailed)
	if te.Issues[0].Params["missingProperty"] != "TOKEN" {
		t.Fatalf("issues %+v", te.Issues)
	}
	_, err = call(tool, "TOKEN", map[string]string{"TOKEN": "shrt"})
	te = wantCode(t, err, toolerr.InputValidationFailed)
	if te.Issues[0].InstancePath != "/ctx/secrets/TOKEN" || te.Issues[0].Keyword != "minLength" {
		t.Fatalf("issues %+v", te.Issues)
	}
	if b, _ := json.Marshal(te); strings.Contains(string(b), "shrt") || strings.Contains(te.Error(), "shrt") {
		t.Fatalf("the error carries the secret: %s", b)
	}

	// An optional secret (a needs entry with optional: true) may be absent.
	opt := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"MAYBE": map[string]any{"type": "string"}}}
		m["needs"] = []map[string]any{{"name": "MAYBE", "optional": true}}
	})
	_, err = call(opt, "MAYBE", nil)
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-not-found" {
		t.Fatalf("optional: %v", te.Details)
	}

	strict := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		m["sandbox"] = "strict"
		m["needsSpec"] = map[string]any{"secrets": secrets}
	})
	_, err = call(strict, "TOKEN", map[string]string{"TOKEN": "ctx-value-1"})
	te = wantCode(t, err, toolerr.HandlerError)
	if te.Details["handlerCode"] != "egress-denied" || strings.Contains(te.Message, "ctx-value-1") {
		t.Fatalf("strict: %v %s", te.Details, te.Message)
	}
}

// Concurrent calls each get their own egress session: responses never
// cross between calls.
func TestGuestFetchConcurrent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	tool := load(t, e, "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port))
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			path := fmt.Sprintf("/call/%d", i)
			res, err := invoke(t, tool, fetchInput("http://api.test:"+port+path, nil))
			if err != nil {
				errs <- err
				return
			}
			if !strings.Contains(string(res.Output), `"path":"`+path+`"`) || len(res.Egress) != 1 {
				errs <- fmt.Errorf("call %d got %s (audit %d)", i, res.Output, len(res.Egress))
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
