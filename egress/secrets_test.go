package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
)

const testSecret = "sk-live-THIS-IS-THE-SECRET"

// reflector echoes every request header in its response headers and its
// body, the body written in small flushed pieces so reads split it.
func reflector() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range r.Header {
			for _, v := range vs {
				w.Header().Add("X-Echo-"+k, v)
			}
		}
		w.Header().Set("X-"+r.Header.Get("X-Name-Echo"), "1")
		var b bytes.Buffer
		for k, vs := range r.Header {
			fmt.Fprintf(&b, "%s=%q;", k, vs)
		}
		fmt.Fprintf(&b, "json=%s;", strings.ReplaceAll(r.Header.Get("X-S"), "/", `\/`))
		body := b.Bytes()
		for len(body) > 0 {
			n := min(len(body), 5)
			_, _ = w.Write(body[:n])
			w.(http.Flusher).Flush()
			body = body[n:]
		}
	})
}

func secretSession(t *testing.T, pol *Policy, h http.Handler, mut func(o *Options)) (*Session, *pipeNet) {
	t.Helper()
	pn := newPipeNet(t, h)
	o := Options{Resolver: &fakeResolver{answers: map[string][][]string{"api.example.com": {{"93.184.216.34"}}, "other.example.com": {{"93.184.216.35"}}}},
		Dial: pn.Dial, Secret: func(n string) (string, bool) { return testSecret, n == "API_KEY" }}
	if mut != nil {
		mut(&o)
	}
	s := NewSession(pol, o)
	t.Cleanup(s.Close)
	return s, pn
}

// F08: a server reflecting the substituted value in headers and body hands
// back only the marker, whatever the read size.
func TestF08SecretRedactedFromResponse(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com"})
	for _, chunk := range []int{1, 2, 3, 7, 64, 4096} {
		s, _ := secretSession(t, pol, reflector(), nil)
		resp, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/anything", Header: map[string]string{
			"X-Anything": "{{secret:API_KEY}}", "X-S": "pre{{secret:API_KEY}}post",
		}})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		buf := make([]byte, chunk)
		for {
			n, err := resp.Read(buf)
			got.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		_ = resp.Close()
		all := got.String() + fmt.Sprint(resp.Header) + fmt.Sprint(resp.HeadersMap())
		if strings.Contains(all, "THIS-IS") || strings.Contains(all, "sk-live") {
			t.Fatalf("chunk %d: the secret came back: %s", chunk, all)
		}
		if !strings.Contains(got.String(), RedactedMarker("API_KEY")) || !strings.Contains(resp.Header.Get("X-Echo-X-Anything"), RedactedMarker("API_KEY")) {
			t.Fatalf("chunk %d: no marker: %s %v", chunk, got.String(), resp.Header)
		}
		if !strings.Contains(got.String(), "pre"+RedactedMarker("API_KEY")+"post") {
			t.Fatalf("chunk %d: surrounding bytes lost: %s", chunk, got.String())
		}
	}
}

// The stream redactor against a plain replace, for random bodies split at
// random points: never a secret byte sequence out, nothing else changed.
func TestRedactStreamSplits(t *testing.T) {
	var r redactor
	r.add("A", "abcab")
	r.add("B", "b/c")
	pats, maxLen := r.snapshot()
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte("abc/%2F")
	for iter := 0; iter < 2000; iter++ {
		src := make([]byte, rng.Intn(60))
		for i := range src {
			src[i] = alphabet[rng.Intn(len(alphabet))]
		}
		whole, _ := redactInto(nil, src, pats, maxLen, true)
		var out, carry []byte
		for rest := src; ; {
			n := 0
			if len(rest) > 0 {
				n = 1 + rng.Intn(len(rest))
			}
			carry = append(carry, rest[:n]...)
			rest = rest[n:]
			var used int
			out, used = redactInto(out, carry, pats, maxLen, len(rest) == 0)
			carry = append(carry[:0], carry[used:]...)
			if len(rest) == 0 {
				break
			}
		}
		if !bytes.Equal(out, whole) {
			t.Fatalf("%q: streamed %q, whole %q", src, out, whole)
		}
		if bytes.Contains(out, []byte("abcab")) || bytes.Contains(out, []byte("b/c")) || bytes.Contains(out, []byte("b%2Fc")) {
			t.Fatalf("%q -> %q still holds a value", src, out)
		}
	}
}

// F08.3: the header cap applies to the placeholder form and errors carry no
// size derived from a value: the same padding fails or passes the same way
// whatever the secret's length.
func TestF08HeaderSizeNoLength(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com"})
	for _, secret := range []string{"x", testSecret, strings.Repeat("s", 3000)} {
		var msgs []string
		for _, pad := range []int{1000, 1100, 1200} {
			s, pn := secretSession(t, pol, okHandler(), func(o *Options) {
				o.Limits.MaxRequestHeaderBytes = 1200
				o.Secret = func(string) (string, bool) { return secret, true }
			})
			_, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{
				"X-Pad": strings.Repeat("a", pad), "X-S": "{{secret:K}}",
			}})
			msgs = append(msgs, fmt.Sprintf("%d:%v:%d", pad, reasonOf(err), len(pn.Dialed())))
			if err != nil && len(secret) > 1 && strings.Contains(err.Error(), fmt.Sprint(len(secret))) {
				t.Fatalf("error %q carries the secret's length", err)
			}
		}
		if got := strings.Join(msgs, " "); got != fmt.Sprintf("1000:%v:1 1100:%v:1 1200:%v:0", Reason(""), Reason(""), ReasonHeaderBudget) {
			t.Fatalf("secret of %d bytes: %s", len(secret), got)
		}
	}
	// Placeholders are capped, so substitution cannot multiply a value.
	s, _ := secretSession(t, pol, okHandler(), nil)
	_, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{
		"X-S": strings.Repeat("{{secret:API_KEY}}", maxPlaceholders+1),
	}})
	if reasonOf(err) != ReasonInvalid {
		t.Fatalf("too many placeholders: %v", err)
	}
}

// Secrets bound with --secret-destination go only there; unbound ones go to
// any allowlisted destination; refusals never carry the value.
func TestSecretDestinationBinding(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com:*", "other.example.com"})
	dests, err := ParseSecretDestinations([]string{"API_KEY=http://api.example.com", "API_KEY=api.example.com:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"API_KEY", "=api.example.com", "API_KEY=http://u@x", "K=*"} {
		if _, err := ParseSecretDestinations([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s, pn := secretSession(t, pol, okHandler(), func(o *Options) {
		o.SecretDestinations = dests
		o.Secret = func(n string) (string, bool) { return testSecret, n == "API_KEY" || n == "FREE" }
	})
	do := func(url, name string) error {
		resp, err := s.Do(context.Background(), &Request{URL: url, Header: map[string]string{"Authorization": "Bearer {{secret:" + name + "}}"}})
		if resp != nil {
			_ = resp.Close()
		}
		return err
	}
	if err := do("http://api.example.com/x", "API_KEY"); err != nil {
		t.Fatal(err)
	}
	err = do("http://other.example.com/x", "API_KEY")
	if reasonOf(err) != ReasonDenied || !strings.Contains(err.Error(), `secret "API_KEY" may not be sent to http://other.example.com:80`) || strings.Contains(err.Error(), testSecret) {
		t.Fatalf("bound secret elsewhere: %v", err)
	}
	if err := do("http://api.example.com:8080/x", "API_KEY"); reasonOf(err) != ReasonDenied {
		t.Fatalf("bound to ports 80 and 8443, sent to 8080: %v", err)
	}
	if err := do("http://other.example.com/x", "FREE"); err != nil {
		t.Fatalf("unbound secret to an allowlisted destination: %v", err)
	}
	if n := len(pn.Dialed()); n != 2 {
		t.Fatalf("dialled %d times, want 2 (refusals never connect)", n)
	}
	atts, _ := s.Attempts()
	if strings.Contains(fmt.Sprintf("%+v", atts), testSecret) {
		t.Fatal("the audit holds the secret")
	}
}

// F09: an IP/CIDR entry admits its addresses only for itself (IP-literal
// destinations on its scheme and port), never for names or ports other
// entries admit. Fake resolver, recording dialer: nothing leaves the box.
func TestF09IPEntryScope(t *testing.T) {
	dns := map[string][][]string{"svc.corp.test": {{"127.0.0.1"}}, "mixed.corp.test": {{"127.0.0.1", "93.184.216.34"}}}
	cases := []struct {
		hosts  []string
		url    string
		want   Reason
		dialed string
	}{
		{[]string{"http://127.0.0.1:9", "*.corp.test:*"}, "http://svc.corp.test:18800/", ReasonDenied, "[]"},
		{[]string{"http://127.0.0.1:18800", "*.corp.test:*"}, "http://svc.corp.test:18800/", ReasonDenied, "[]"},
		{[]string{"127.0.0.0/8:*", "*.corp.test:*"}, "http://svc.corp.test:18800/", ReasonDenied, "[]"},
		{[]string{"*.corp.test:*"}, "http://svc.corp.test:18800/", ReasonDenied, "[]"},
		{[]string{"http://127.0.0.1:9"}, "http://127.0.0.1:18800/", ReasonDenied, "[]"},
		{[]string{"http://127.0.0.1:9"}, "https://127.0.0.1:9/", ReasonDenied, "[]"},
		{[]string{"http://127.0.0.1:9"}, "http://127.0.0.1:9/", "", "[127.0.0.1:9]"},
		{[]string{"http://127.0.0.1:9"}, "http://[::ffff:127.0.0.1]:9/", "", "[127.0.0.1:9]"},
		{[]string{"127.0.0.0/8:*"}, "http://127.0.0.2:18800/", "", "[127.0.0.2:18800]"},
		// A name with a public and a loopback answer: only the public one.
		{[]string{"http://127.0.0.1:80", "*.corp.test"}, "http://mixed.corp.test/", "", "[93.184.216.34:80]"},
	}
	for _, c := range cases {
		pol, err := ParsePolicy("allowlist", c.hosts)
		if err != nil {
			t.Fatal(err)
		}
		pn := newPipeNet(t, okHandler())
		s := NewSession(pol, Options{Resolver: &fakeResolver{answers: dns}, Dial: pn.Dial})
		resp, err := s.Do(context.Background(), &Request{URL: c.url})
		if resp != nil {
			_ = resp.Close()
		}
		s.Close()
		if reasonOf(err) != c.want || fmt.Sprint(pn.Dialed()) != c.dialed {
			t.Errorf("%v %s: %v, dialled %v; want %v, %s", c.hosts, c.url, err, pn.Dialed(), c.want, c.dialed)
		}
	}
	// An operator allow-range still admits a name's loopback answer.
	pol, _ := ParsePolicy("allowlist", []string{"*.corp.test:*"})
	pn := newPipeNet(t, okHandler())
	s := NewSession(pol, Options{Resolver: &fakeResolver{answers: dns}, Dial: pn.Dial, AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	defer s.Close()
	resp, err := s.Do(context.Background(), &Request{URL: "http://svc.corp.test:18800/"})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Close()
}

// Redaction buffers are charged to the memory budget and released on Close.
func TestRedactionMemoryReleased(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com"})
	acct := limits.NewAccount(1 << 20)
	s, _ := secretSession(t, pol, reflector(), func(o *Options) { o.Memory = acct })
	resp, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{"X-S": "{{secret:API_KEY}}"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Read(make([]byte, 3))
	_ = resp.Close()
	s.Close()
	if !acct.Reserve(1 << 20) {
		t.Fatal("memory not released")
	}
}

// A request carrying a secret cannot ask for a slice or an encoding of the
// answer (a reflected value would come back past exact-match redaction),
// and an encoded answer the transport did not undo is refused.
func TestSecretRequestNoPartialOrEncodedAnswer(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com"})
	for _, h := range []string{"Range", "If-Range", "Accept-Encoding"} {
		s, pn := secretSession(t, pol, reflector(), nil)
		_, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{"X-S": "{{secret:API_KEY}}", h: "bytes=0-10"}})
		if reasonOf(err) != ReasonInvalid || len(pn.Dialed()) != 0 {
			t.Errorf("%s with a placeholder: %v", h, err)
		}
	}
	brotli := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		_, _ = io.WriteString(w, r.Header.Get("X-S"))
	})
	s, _ := secretSession(t, pol, brotli, nil)
	if _, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{"X-S": "{{secret:API_KEY}}"}}); reasonOf(err) != ReasonUnavailable {
		t.Fatalf("encoded answer: %v", err)
	}
	// Without a placeholder, both are fine.
	s, _ = secretSession(t, pol, brotli, nil)
	resp, err := s.Do(context.Background(), &Request{URL: "http://api.example.com/", Header: map[string]string{"Range": "bytes=0-1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Close()
}

// FuzzRedactStream: for any values and any body split at any points, the
// streamed redaction equals the whole-body one and holds no value.
func FuzzRedactStream(f *testing.F) {
	f.Add("abcab", "b/c", []byte("xxabcabcabyyb/cb%2Fc"), uint8(3))
	f.Add("aa", "a", []byte("aaaaaaa"), uint8(1))
	f.Fuzz(func(t *testing.T, v1, v2 string, body []byte, step uint8) {
		if v1 == "" || len(v1) > 64 || len(v2) > 64 || len(body) > 4096 {
			t.Skip()
		}
		var r redactor
		r.add("A", v1)
		r.add("B", v2)
		pats, maxLen := r.snapshot()
		whole, _ := redactInto(nil, body, pats, maxLen, true)
		n := int(step%16) + 1
		var out, carry []byte
		for rest := body; ; {
			k := min(n, len(rest))
			carry = append(carry, rest[:k]...)
			rest = rest[k:]
			var used int
			out, used = redactInto(out, carry, pats, maxLen, len(rest) == 0)
			carry = append(carry[:0], carry[used:]...)
			if len(rest) == 0 {
				break
			}
		}
		if !bytes.Equal(out, whole) {
			t.Fatalf("streamed %q, whole %q", out, whole)
		}
		// A value may reappear only if a marker itself spells it.
		for _, p := range pats {
			if bytes.Contains(out, p.b) && !bytes.Contains([]byte(RedactedMarker("A")+RedactedMarker("B")), p.b) {
				stripped := bytes.ReplaceAll(bytes.ReplaceAll(out, []byte(RedactedMarker("A")), nil), []byte(RedactedMarker("B")), nil)
				if bytes.Contains(stripped, p.b) {
					t.Fatalf("%q holds %q", out, p.b)
				}
			}
		}
	})
}
