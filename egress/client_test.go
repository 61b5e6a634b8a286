package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// fakeResolver answers from a table; each name may have a sequence of
// answers (one per lookup, the last repeating) to model DNS rebinding.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]string
	lookups map[string]int
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if r.lookups == nil {
		r.lookups = map[string]int{}
	}
	i := min(r.lookups[host], len(seq)-1)
	r.lookups[host]++
	var out []netip.Addr
	for _, s := range seq[i] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// pipeNet is a recording dialer that never touches the network: every
// "connection" is an in-memory pipe served by an HTTP handler.
type pipeNet struct {
	mu     sync.Mutex
	dialed []string
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	srv    *http.Server
}

func newPipeNet(t *testing.T, h http.Handler) *pipeNet {
	p := &pipeNet{conns: make(chan net.Conn, 16), done: make(chan struct{})}
	p.srv = &http.Server{Handler: h}
	go func() { _ = p.srv.Serve(pipeListener{p}) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *pipeNet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	p.dialed = append(p.dialed, addr)
	p.mu.Unlock()
	c1, c2 := net.Pipe()
	p.conns <- c2
	return c1, nil
}

func (p *pipeNet) Dialed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dialed...)
}

type pipeListener struct{ p *pipeNet }

func (l pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.conns:
		return c, nil
	case <-l.p.done:
		return nil, net.ErrClosed
	}
}
func (l pipeListener) Close() error   { l.p.once.Do(func() { close(l.p.done) }); return nil }
func (l pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"host":%q}`, r.Host)
	})
}

func reasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	return ReasonOf(err)
}

// TestAttackTable runs each attack against a fake resolver answering public
// and private addresses and a recording dialer that never connects. Each
// case states the outcome and exactly which addresses were dialled.
func TestAttackTable(t *testing.T) {
	dns := map[string][][]string{
		"api.example.com":    {{"93.184.216.34"}},
		"example.com":        {{"93.184.216.35"}},
		"evil.example":       {{"203.0.114.9"}},
		"loopback.example":   {{"127.0.0.1"}},
		"mapped.example":     {{"::ffff:127.0.0.1"}},
		"nat64.example":      {{"64:ff9b::a00:1"}},
		"metadata.example":   {{"169.254.169.254"}},
		"cgnat.example":      {{"100.64.0.1"}},
		"zero.example":       {{"0.0.0.0"}},
		"multicast.example":  {{"224.0.0.251"}},
		"linklocal6.example": {{"fe80::1"}},
		"mixed.example":      {{"10.0.0.1", "93.184.216.36", "127.0.0.1"}},
		"private.example":    {{"10.1.2.3"}},
	}
	cases := []struct {
		name    string
		kind    string
		hosts   []string
		allow   []string
		url     string
		header  map[string]string
		want    Reason
		dialled []string
	}{
		{"wildcard matches a subdomain", "allowlist", []string{"*.example.com"}, nil, "http://api.example.com/", nil, "", []string{"93.184.216.34:80"}},
		{"wildcard never matches the apex", "allowlist", []string{"*.example.com"}, nil, "http://example.com/", nil, ReasonDenied, nil},
		{"apex entry does not match a subdomain", "allowlist", []string{"example.com"}, nil, "http://api.example.com/", nil, ReasonDenied, nil},
		{"port mismatch", "allowlist", []string{"api.example.com"}, nil, "http://api.example.com:8080/", nil, ReasonDenied, nil},
		{"port named", "allowlist", []string{"api.example.com:8080"}, nil, "http://api.example.com:8080/", nil, "", []string{"93.184.216.34:8080"}},
		{"any port", "allowlist", []string{"api.example.com:*"}, nil, "http://api.example.com:9/", nil, "", []string{"93.184.216.34:9"}},
		{"scheme mismatch", "allowlist", []string{"https://api.example.com"}, nil, "http://api.example.com/", nil, ReasonDenied, nil},
		{"IP literal against a hostname entry", "allowlist", []string{"api.example.com"}, nil, "http://93.184.216.34/", nil, ReasonDenied, nil},
		{"IP literal entry", "allowlist", []string{"93.184.216.34"}, nil, "http://93.184.216.34/", nil, "", []string{"93.184.216.34:80"}},
		{"hostname against an IP entry", "allowlist", []string{"93.184.216.34"}, nil, "http://api.example.com/", nil, ReasonDenied, nil},
		{"decimal IPv4 spelling, not listed", "allowlist", []string{"api.example.com"}, nil, "http://2130706433/", nil, ReasonDenied, nil},
		{"decimal IPv4 spelling, unrestricted", "unrestricted", nil, nil, "http://2130706433/", nil, ReasonDenied, nil},
		{"octal IPv4 spelling, unrestricted", "unrestricted", nil, nil, "http://0177.0.0.1/", nil, ReasonDenied, nil},
		{"hex IPv4 spelling, unrestricted", "unrestricted", nil, nil, "http://0x7f.0.0.1/", nil, ReasonDenied, nil},
		{"short IPv4 spelling, unrestricted", "unrestricted", nil, nil, "http://127.1/", nil, ReasonDenied, nil},
		{"decimal spelling of a named IP", "allowlist", []string{"127.0.0.1:*"}, nil, "http://2130706433:8080/", nil, "", []string{"127.0.0.1:8080"}},
		{"IPv4-mapped literal, unrestricted", "unrestricted", nil, nil, "http://[::ffff:127.0.0.1]/", nil, ReasonDenied, nil},
		{"IPv4-mapped literal of a named IP", "allowlist", []string{"127.0.0.1"}, nil, "http://[::ffff:127.0.0.1]/", nil, "", []string{"127.0.0.1:80"}},
		{"name resolving to loopback", "unrestricted", nil, nil, "http://loopback.example/", nil, ReasonDenied, nil},
		{"name resolving to loopback, operator range", "unrestricted", nil, []string{"127.0.0.0/8"}, "http://loopback.example/", nil, "", []string{"127.0.0.1:80"}},
		{"name resolving to IPv4-mapped loopback", "unrestricted", nil, nil, "http://mapped.example/", nil, ReasonDenied, nil},
		{"name resolving to NAT64 private", "unrestricted", nil, nil, "http://nat64.example/", nil, ReasonDenied, nil},
		{"name resolving to cloud metadata", "unrestricted", nil, nil, "http://metadata.example/", nil, ReasonDenied, nil},
		{"metadata literal", "unrestricted", nil, nil, "http://169.254.169.254/latest/meta-data/", nil, ReasonDenied, nil},
		{"name resolving to CGNAT", "unrestricted", nil, nil, "http://cgnat.example/", nil, ReasonDenied, nil},
		{"name resolving to 0.0.0.0", "unrestricted", nil, nil, "http://zero.example/", nil, ReasonDenied, nil},
		{"name resolving to multicast", "unrestricted", nil, nil, "http://multicast.example/", nil, ReasonDenied, nil},
		{"name resolving to IPv6 link-local", "unrestricted", nil, nil, "http://linklocal6.example/", nil, ReasonDenied, nil},
		// F09: a CIDR entry admits its addresses only as destinations it
		// matches itself (IP literals, its scheme and port), never for a
		// name another entry admits.
		{"private address named by a CIDR entry, reached by a name", "allowlist", []string{"private.example", "10.0.0.0/8"}, nil, "http://private.example/", nil, ReasonDenied, nil},
		{"private address named by a CIDR entry, as a literal", "allowlist", []string{"private.example", "10.0.0.0/8"}, nil, "http://10.1.2.3/", nil, "", []string{"10.1.2.3:80"}},
		{"private address named by a CIDR entry, other port", "allowlist", []string{"10.0.0.0/8"}, nil, "http://10.1.2.3:8080/", nil, ReasonDenied, nil},
		{"private address not named", "allowlist", []string{"private.example"}, nil, "http://private.example/", nil, ReasonDenied, nil},
		{"mixed answers: only the public address is dialled", "unrestricted", nil, nil, "http://mixed.example/", nil, "", []string{"93.184.216.36:80"}},
		{"userinfo trick", "allowlist", []string{"api.example.com"}, nil, "http://api.example.com@evil.example/", nil, ReasonInvalid, nil},
		{"userinfo with password", "unrestricted", nil, nil, "http://u:p@api.example.com/", nil, ReasonInvalid, nil},
		{"network none", "none", nil, nil, "http://api.example.com/", nil, ReasonDenied, nil},
		{"header value with CRLF", "unrestricted", nil, nil, "http://api.example.com/", map[string]string{"X-A": "v\r\nX-Injected: 1"}, ReasonInvalid, nil},
		{"header value with LF", "unrestricted", nil, nil, "http://api.example.com/", map[string]string{"X-A": "v\nX-Injected: 1"}, ReasonInvalid, nil},
		{"header name with CRLF", "unrestricted", nil, nil, "http://api.example.com/", map[string]string{"X-A\r\nX-B": "v"}, ReasonInvalid, nil},
		{"header name with a space", "unrestricted", nil, nil, "http://api.example.com/", map[string]string{"X A": "v"}, ReasonInvalid, nil},
		{"Host header override", "unrestricted", nil, nil, "http://api.example.com/", map[string]string{"Host": "internal"}, ReasonInvalid, nil},
		{"unknown host", "unrestricted", nil, nil, "http://nxdomain.example/", nil, ReasonUnavailable, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol, err := ParsePolicy(c.kind, c.hosts)
			if err != nil {
				t.Fatal(err)
			}
			var ranges []netip.Prefix
			for _, r := range c.allow {
				ranges = append(ranges, netip.MustParsePrefix(r))
			}
			pn := newPipeNet(t, okHandler())
			s := NewSession(pol, Options{Resolver: &fakeResolver{answers: dns}, Dial: pn.Dial, AllowRanges: ranges})
			defer s.Close()
			resp, err := s.Do(context.Background(), &Request{Method: "GET", URL: c.url, Header: c.header})
			if got := reasonOf(err); got != c.want {
				t.Fatalf("reason = %v (%v), want %v", got, err, c.want)
			}
			if resp != nil {
				b, _ := io.ReadAll(resp)
				if !strings.Contains(string(b), `"host"`) {
					t.Errorf("body %q", b)
				}
				_ = resp.Close()
			}
			if d := pn.Dialed(); fmt.Sprint(d) != fmt.Sprint(c.dialled) {
				t.Fatalf("dialled %v, want %v", d, c.dialled)
			}
			atts, _ := s.Attempts()
			if len(atts) > 0 && atts[0].Allowed != (c.want == "") {
				t.Errorf("audit %+v, want allowed=%v", atts[0], c.want == "")
			}
			if c.want == ReasonDenied && (len(atts) == 0 || atts[0].Reason == "") {
				t.Errorf("denied attempt not audited with a reason: %+v", atts)
			}
		})
	}
}

// TestDNSRebinding: a name answers a public address, then a private one.
// Each connection resolves once and dials exactly the address it checked;
// the private answer is never dialled.
func TestDNSRebinding(t *testing.T) {
	res := &fakeResolver{answers: map[string][][]string{"rebind.example": {{"93.184.216.34"}, {"127.0.0.1"}, {"93.184.216.34"}}}}
	pn := newPipeNet(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // force a new connection (and lookup) per request
		fmt.Fprint(w, "{}")
	}))
	pol, _ := ParsePolicy("allowlist", []string{"rebind.example"})
	s := NewSession(pol, Options{Resolver: res, Dial: pn.Dial})
	defer s.Close()
	var reasons []Reason
	for range 3 {
		resp, err := s.Do(context.Background(), &Request{URL: "http://rebind.example/"})
		reasons = append(reasons, reasonOf(err))
		if resp != nil {
			_, _ = io.ReadAll(resp)
			_ = resp.Close()
		}
	}
	if fmt.Sprint(reasons) != fmt.Sprint([]Reason{"", ReasonDenied, ""}) {
		t.Fatalf("reasons = %v", reasons)
	}
	if d := pn.Dialed(); fmt.Sprint(d) != "[93.184.216.34:80 93.184.216.34:80]" {
		t.Fatalf("dialled %v", d)
	}
	if res.lookups["rebind.example"] != 3 {
		t.Fatalf("lookups = %d, want one per connection", res.lookups["rebind.example"])
	}
}

// loopbackOptions lets a session reach loopback servers the way an
// operator does (--egress-allow-cidr 127.0.0.0/8), resolving "localhost"
// and "*.test" names to 127.0.0.1 without DNS.
func loopbackOptions() Options {
	return Options{
		Resolver:    loopbackResolver{},
		AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}
}

type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == "localhost" || strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func hostPort(t *testing.T, srv *httptest.Server) (host, port string) {
	t.Helper()
	h, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(srv.URL, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

func TestLoopbackAllowedAndDenied(t *testing.T) {
	srv := httptest.NewServer(okHandler())
	defer srv.Close()
	_, port := hostPort(t, srv)
	pol, _ := ParsePolicy("allowlist", []string{"api.test:" + port})
	s := NewSession(pol, loopbackOptions())
	defer s.Close()
	resp, err := s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/x"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp)
	_ = resp.Close()
	if resp.Status != 200 || !strings.Contains(string(b), "api.test:"+port) {
		t.Fatalf("status %d body %q", resp.Status, b)
	}
	// The same server under a name that is not listed.
	if _, err := s.Do(context.Background(), &Request{URL: "http://other.test:" + port + "/x"}); reasonOf(err) != ReasonDenied {
		t.Fatalf("unlisted name: %v", err)
	}
	// Without the operator range, loopback is denied even for a listed name.
	s2 := NewSession(pol, Options{Resolver: loopbackResolver{}})
	defer s2.Close()
	if _, err := s2.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/x"}); reasonOf(err) != ReasonDenied {
		t.Fatalf("no allow-range: %v", err)
	}
}

func TestRedirects(t *testing.T) {
	var mu sync.Mutex
	seenAuth := map[string]string{}
	final := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth[r.URL.Path] = r.Header.Get("Authorization") + "|" + r.Header.Get("X-Key")
		mu.Unlock()
		fmt.Fprintf(w, `{"path":%q,"method":%q}`, r.URL.Path, r.Method)
	}))
	defer final.Close()
	_, fport := hostPort(t, final)
	hopSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth[r.URL.Path] = r.Header.Get("Authorization") + "|" + r.Header.Get("X-Key")
		mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/chain/"):
			var n int
			fmt.Sscanf(r.URL.Path, "/chain/%d", &n)
			if n == 0 {
				fmt.Fprint(w, `{"done":true}`)
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusFound)
		case r.URL.Path == "/to-denied":
			http.Redirect(w, r, "http://denied.test:"+fport+"/", http.StatusFound)
		case r.URL.Path == "/to-other-origin":
			http.Redirect(w, r, "http://final.test:"+fport+"/landed", http.StatusTemporaryRedirect)
		case r.URL.Path == "/same-origin":
			http.Redirect(w, r, "/chain/0", http.StatusFound)
		case r.URL.Path == "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case r.URL.Path == "/post-303":
			http.Redirect(w, r, "http://final.test:"+fport+"/after-303", http.StatusSeeOther)
		}
	}))
	defer hopSrv.Close()
	_, hport := hostPort(t, hopSrv)
	pol, _ := ParsePolicy("allowlist", []string{"hop.test:" + hport, "final.test:" + fport})
	secrets := map[string]string{"KEY": "s3cr3t"}
	opts := loopbackOptions()
	opts.Secret = func(n string) (string, bool) { v, ok := secrets[n]; return v, ok }
	do := func(path, method string, hdr map[string]string) (*Response, error) {
		s := NewSession(pol, opts)
		t.Cleanup(s.Close)
		return s.Do(context.Background(), &Request{Method: method, URL: "http://hop.test:" + hport + path, Header: hdr, Body: []byte(`{}`)})
	}
	// Five redirects are followed; a sixth is refused.
	if r, err := do("/chain/5", "GET", nil); err != nil || r.Status != 200 {
		t.Fatalf("5 redirects: %v", err)
	}
	if _, err := do("/chain/6", "GET", nil); reasonOf(err) != ReasonRedirect {
		t.Fatalf("6 redirects: %v", err)
	}
	if _, err := do("/to-denied", "GET", nil); reasonOf(err) != ReasonDenied {
		t.Fatalf("redirect to a denied host: %v", err)
	}
	// A redirect to the metadata address: not listed, so denied by the
	// policy; under unrestricted, denied by address class before any dial.
	if _, err := do("/to-metadata", "GET", nil); reasonOf(err) != ReasonDenied {
		t.Fatalf("redirect to metadata: %v", err)
	}
	anyPol, _ := ParsePolicy("unrestricted", nil)
	s := NewSession(anyPol, opts)
	defer s.Close()
	_, err := s.Do(context.Background(), &Request{URL: "http://hop.test:" + hport + "/to-metadata"})
	if reasonOf(err) != ReasonDenied || !strings.Contains(err.Error(), "169.254.169.254 (cloud-metadata)") {
		t.Fatalf("redirect to metadata, unrestricted: %v", err)
	}
	hdr := map[string]string{"Authorization": "Bearer guest-token", "X-Key": SecretPlaceholder("KEY")}
	if r, err := do("/same-origin", "GET", hdr); err != nil || r.Status != 200 {
		t.Fatalf("same-origin redirect: %v", err)
	}
	mu.Lock()
	if got := seenAuth["/chain/0"]; got != "Bearer guest-token|s3cr3t" {
		t.Errorf("same-origin hop lost credentials: %q", got)
	}
	mu.Unlock()
	r, err := do("/to-other-origin", "POST", hdr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	if !strings.Contains(string(b), `"method":"POST"`) {
		t.Errorf("307 changed the method: %s", b)
	}
	mu.Lock()
	if got := seenAuth["/to-other-origin"]; got != "Bearer guest-token|s3cr3t" {
		t.Errorf("first hop: %q", got)
	}
	if got := seenAuth["/landed"]; got != "|" {
		t.Errorf("cross-origin hop kept credentials: %q", got)
	}
	mu.Unlock()
	r, err = do("/post-303", "POST", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r)
	if !strings.Contains(string(b), `"method":"GET"`) {
		t.Errorf("303 kept the method: %s", b)
	}
}

func TestRedirectHTTPSToHTTPRefused(t *testing.T) {
	plain := httptest.NewServer(okHandler())
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			http.Redirect(w, r, plain.URL+"/", http.StatusFound)
			return
		}
		fmt.Fprint(w, `{"tls":true}`)
	}))
	defer tlsSrv.Close()
	_, tport := hostPort(t, tlsSrv)
	_, pport := hostPort(t, plain)
	pol, _ := ParsePolicy("allowlist", []string{"127.0.0.1:" + tport, "127.0.0.1:" + pport})
	opts := loopbackOptions()
	opts.TLSConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig
	s := NewSession(pol, opts)
	defer s.Close()
	r, err := s.Do(context.Background(), &Request{URL: tlsSrv.URL + "/ok"})
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	_ = r.Close()
	if _, err := s.Do(context.Background(), &Request{URL: tlsSrv.URL + "/down"}); reasonOf(err) != ReasonRedirect {
		t.Fatalf("https → http: %v", err)
	}
}

func TestBudgets(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(strings.Repeat("x", 2000)))
		case "/exact":
			w.Write([]byte(strings.Repeat("x", 1000)))
		case "/bigheader":
			w.Header().Set("X-Big", strings.Repeat("h", 10000))
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/slowbody":
			w.Write([]byte("{"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			fmt.Fprint(w, "{}")
		}
	}))
	defer srv.Close()
	defer close(release)
	pol, _ := ParsePolicy("allowlist", []string{"127.0.0.1:*"})
	session := func(l Limits, mem Memory) *Session {
		o := loopbackOptions()
		o.Limits, o.Memory = l, mem
		s := NewSession(pol, o)
		t.Cleanup(s.Close)
		return s
	}
	get := func(s *Session, ctx context.Context, path string, body []byte) (*Response, error) {
		return s.Do(ctx, &Request{Method: "POST", URL: srv.URL + path, Body: body})
	}
	ctx := context.Background()

	t.Run("request count", func(t *testing.T) {
		s := session(Limits{MaxRequests: 2}, nil)
		for i := range 2 {
			r, err := get(s, ctx, "/", nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			_ = r.Close()
		}
		if _, err := get(s, ctx, "/", nil); reasonOf(err) != ReasonRequestBudget {
			t.Fatalf("third request: %v", err)
		}
	})
	t.Run("response body", func(t *testing.T) {
		s := session(Limits{MaxBodyBytes: 1000}, nil)
		r, err := get(s, ctx, "/exact", nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(r); err != nil || len(b) != 1000 {
			t.Fatalf("exact budget: %d bytes, %v", len(b), err)
		}
		_ = r.Close()
		s = session(Limits{MaxBodyBytes: 1000}, nil)
		r, err = get(s, ctx, "/big", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); reasonOf(err) != ReasonBodyBudget {
			t.Fatalf("oversized response: %v", err)
		}
	})
	t.Run("request body", func(t *testing.T) {
		s := session(Limits{MaxBodyBytes: 100}, nil)
		if _, err := get(s, ctx, "/", make([]byte, 101)); reasonOf(err) != ReasonBodyBudget {
			t.Fatalf("oversized request: %v", err)
		}
	})
	t.Run("response headers", func(t *testing.T) {
		s := session(Limits{MaxResponseHeaderBytes: 4096}, nil)
		if _, err := get(s, ctx, "/bigheader", nil); reasonOf(err) != ReasonHeaderBudget {
			t.Fatalf("oversized response headers: %v", err)
		}
	})
	t.Run("request headers", func(t *testing.T) {
		s := session(Limits{MaxRequestHeaderBytes: 1024}, nil)
		_, err := s.Do(ctx, &Request{URL: srv.URL, Header: map[string]string{"X-Big": strings.Repeat("v", 2000)}})
		if reasonOf(err) != ReasonHeaderBudget {
			t.Fatalf("oversized request headers: %v", err)
		}
	})
	t.Run("connections", func(t *testing.T) {
		s := session(Limits{MaxConns: 1}, nil)
		r, err := get(s, ctx, "/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := get(s, ctx, "/", nil); reasonOf(err) != ReasonConnBudget {
			t.Fatalf("second open response: %v", err)
		}
		_ = r.Close()
		r, err = get(s, ctx, "/", nil)
		if err != nil {
			t.Fatalf("after close: %v", err)
		}
		_ = r.Close()
	})
	t.Run("slow response past the timeout", func(t *testing.T) {
		s := session(Limits{RequestTimeout: 200 * time.Millisecond}, nil)
		if _, err := get(s, ctx, "/slow", nil); reasonOf(err) != ReasonTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow response: %v", err)
		}
	})
	t.Run("slow response past the caller's deadline", func(t *testing.T) {
		s := session(Limits{RequestTimeout: time.Hour}, nil)
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := get(s, dctx, "/slow", nil); reasonOf(err) != ReasonTimeout {
			t.Fatalf("slow response: %v", err)
		}
	})
	t.Run("slow body past the timeout", func(t *testing.T) {
		s := session(Limits{RequestTimeout: 200 * time.Millisecond}, nil)
		r, err := get(s, ctx, "/slowbody", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); reasonOf(err) != ReasonTimeout {
			t.Fatalf("slow body: %v", err)
		}
	})
	t.Run("cancellation mid-request", func(t *testing.T) {
		s := session(Limits{}, nil)
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		done := make(chan error, 1)
		go func() { _, err := get(s, cctx, "/slow", nil); done <- err }()
		select {
		case err := <-done:
			if reasonOf(err) != ReasonTimeout || !strings.Contains(err.Error(), "cancelled") {
				t.Fatalf("cancelled request: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled request did not return")
		}
	})
	t.Run("memory", func(t *testing.T) {
		acct := limits.NewAccount(1 << 10)
		s := session(Limits{}, acct)
		if _, err := get(s, ctx, "/", make([]byte, 2<<10)); reasonOf(err) != ReasonMemoryBudget {
			t.Fatalf("request body over memMB: %v", err)
		}
		r, err := get(s, ctx, "/", make([]byte, 100))
		if err != nil {
			t.Fatal(err)
		}
		if acct.Peak() < 100 {
			t.Errorf("peak %d: the request body was not charged", acct.Peak())
		}
		_, _ = io.ReadAll(r)
		_ = r.Close()
		s.Close()
		if got := acct.Peak(); got > 1<<10 {
			t.Errorf("peak %d over the cap", got)
		}
	})
	t.Run("session close releases everything", func(t *testing.T) {
		acct := limits.NewAccount(1 << 20)
		s := session(Limits{}, acct)
		r, err := get(s, ctx, "/slowbody", []byte("body"))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := r.Read(make([]byte, 10)); reasonOf(err) != ReasonBadHandle {
			t.Fatalf("read after session close: %v", err)
		}
		if !acct.Reserve(1 << 20) {
			t.Fatal("session close did not release its memory")
		}
	})
}

func TestSecretSubstitution(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		fmt.Fprint(w, "{}")
	}))
	defer srv.Close()
	_, port := hostPort(t, srv)
	secret := func(n string) (string, bool) {
		switch n {
		case "TOKEN":
			return "t0ken", true
		case "BAD":
			return "a\r\nX-Evil: 1", true
		}
		return "", false
	}
	pol, _ := ParsePolicy("allowlist", []string{"api.test:" + port})
	o := loopbackOptions()
	o.Secret = secret
	s := NewSession(pol, o)
	defer s.Close()
	r, err := s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/", Header: map[string]string{"Authorization": "Bearer " + SecretPlaceholder("TOKEN")}})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	if v := <-got; v != "Bearer t0ken" {
		t.Fatalf("server saw %q", v)
	}
	_, err = s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/", Header: map[string]string{"Authorization": SecretPlaceholder("NOPE")}})
	if reasonOf(err) != ReasonNotFound {
		t.Fatalf("undeclared secret: %v", err)
	}
	_, err = s.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/", Header: map[string]string{"Authorization": SecretPlaceholder("BAD")}})
	if reasonOf(err) != ReasonInvalid || strings.Contains(err.Error(), "X-Evil") {
		t.Fatalf("secret with CRLF: %v", err)
	}
	// Unrestricted destinations never get secrets.
	anyPol, _ := ParsePolicy("unrestricted", nil)
	s2 := NewSession(anyPol, o)
	defer s2.Close()
	_, err = s2.Do(context.Background(), &Request{URL: "http://api.test:" + port + "/", Header: map[string]string{"Authorization": SecretPlaceholder("TOKEN")}})
	if reasonOf(err) != ReasonDenied {
		t.Fatalf("secret to an unrestricted destination: %v", err)
	}
	atts, _ := s.Attempts()
	for _, a := range atts {
		if strings.Contains(fmt.Sprintf("%+v", a), "t0ken") {
			t.Fatalf("audit holds the secret: %+v", a)
		}
	}
}
