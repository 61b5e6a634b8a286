package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEntryGrammar(t *testing.T) {
	ok := []struct {
		in       string
		name     string
		wildcard bool
		prefix   string
		port     int
		schemes  schemeSet
	}{
		{"example.com", "example.com", false, "", portDefault, schemeHTTP | schemeHTTPS},
		{"EXAMPLE.com.", "example.com", false, "", portDefault, schemeHTTP | schemeHTTPS},
		{"https://api.example.com", "api.example.com", false, "", portDefault, schemeHTTPS},
		{"HTTP://api.example.com:8080", "api.example.com", false, "", 8080, schemeHTTP},
		{"*.example.com", "example.com", true, "", portDefault, schemeHTTP | schemeHTTPS},
		{"*.example.com:*", "example.com", true, "", portAny, schemeHTTP | schemeHTTPS},
		{"bücher.example", "xn--bcher-kva.example", false, "", portDefault, schemeHTTP | schemeHTTPS},
		{"BÜCHER.example", "xn--bcher-kva.example", false, "", portDefault, schemeHTTP | schemeHTTPS},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", false, "", portDefault, schemeHTTP | schemeHTTPS},
		{"127.0.0.1", "", false, "127.0.0.1/32", portDefault, schemeHTTP | schemeHTTPS},
		{"127.0.0.1:*", "", false, "127.0.0.1/32", portAny, schemeHTTP | schemeHTTPS},
		{"10.0.0.0/8", "", false, "10.0.0.0/8", portDefault, schemeHTTP | schemeHTTPS},
		{"10.1.2.3/8:443", "", false, "10.0.0.0/8", 443, schemeHTTP | schemeHTTPS},
		{"[::1]", "", false, "::1/128", portDefault, schemeHTTP | schemeHTTPS},
		{"[::1]:8443", "", false, "::1/128", 8443, schemeHTTP | schemeHTTPS},
		{"::1", "", false, "::1/128", portDefault, schemeHTTP | schemeHTTPS},
		{"fd00::/8", "", false, "fd00::/8", portDefault, schemeHTTP | schemeHTTPS},
		{"https://[fd00::/8]:*", "", false, "fd00::/8", portAny, schemeHTTPS},
		{"under_score.example.com", "under_score.example.com", false, "", portDefault, schemeHTTP | schemeHTTPS},
	}
	for _, c := range ok {
		e, err := ParseEntry(c.in)
		if err != nil {
			t.Errorf("ParseEntry(%q): %v", c.in, err)
			continue
		}
		var wantPrefix netip.Prefix
		if c.prefix != "" {
			wantPrefix = netip.MustParsePrefix(c.prefix)
		}
		if e.name != c.name || e.wildcard != c.wildcard || e.prefix != wantPrefix || e.port != c.port || e.schemes != c.schemes {
			t.Errorf("ParseEntry(%q) = %+v", c.in, e)
		}
		if e.String() != c.in {
			t.Errorf("String() = %q, want %q", e.String(), c.in)
		}
	}
	bad := []struct{ in, reason string }{
		{"", "empty"},
		{"*", "bare wildcard"},
		{"*.com", "too broad"},
		{"a.*.example.com", "first label"},
		{"*example.com", "first label"},
		{"ftp://example.com", "scheme"},
		{"user@example.com", "userinfo"},
		{"https://user:pw@example.com", "userinfo"},
		{"example.com/path", "no path (\"/path\")"},
		{"https://api.example.com/v1", "no path (\"/v1\")"},
		{"10.0.0.1/v1", "no path"},
		{"example.com?q", "no path"},
		{"example.com#f", "no path"},
		{"example.com:0", "out of range"},
		{"example.com:65536", "out of range"},
		{"example.com:http", "invalid port"},
		{"example.com:", "empty port"},
		{"example .com", "whitespace"},
		{"exa\nmple.com", "whitespace"},
		{"2130706433", "dotted decimal"},
		{"0x7f.1", "dotted decimal"},
		{"0177.0.0.1", "dotted decimal"},
		{"10.0.0.0/33", "invalid CIDR"},
		{"[::1", "unterminated"},
		{"[::1]x", "unexpected text"},
		{"[fe80::1%eth0]", "zones"},
		{"*.10.0.0.1", "wildcard cannot precede"},
		{"a..b", "empty label"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{"exa%mple.com", "invalid character"},
	}
	for _, c := range bad {
		_, err := ParseEntry(c.in)
		var ee *EntryError
		if !errors.As(err, &ee) {
			t.Errorf("ParseEntry(%q) = %v, want an *EntryError", c.in, err)
			continue
		}
		if !strings.Contains(err.Error(), c.reason) {
			t.Errorf("ParseEntry(%q) = %v, want a reason containing %q", c.in, err, c.reason)
		}
	}
}

func TestParsePolicyNamesTheBadEntry(t *testing.T) {
	_, err := ParsePolicy("allowlist", []string{"ok.example.com", "*.com"})
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Index != 1 || ee.Entry != "*.com" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), `network.hosts[1] "*.com"`) {
		t.Fatalf("message %q does not name the entry", err)
	}
	if _, err := ParsePolicy("sometimes", nil); err == nil {
		t.Fatal("unknown kind accepted")
	}
	p, err := ParsePolicy("", nil)
	if err != nil || p.Kind() != KindNone {
		t.Fatalf("absent kind = %v, %v", p, err)
	}
}

func mustOrigin(t *testing.T, raw string) Origin {
	t.Helper()
	_, o, err := ParseURL(raw)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", raw, err)
	}
	return o
}

func TestPolicyMatch(t *testing.T) {
	cases := []struct {
		entry string
		url   string
		want  bool
	}{
		// apex vs wildcard
		{"*.example.com", "https://api.example.com/", true},
		{"*.example.com", "https://a.b.example.com/", true},
		{"*.example.com", "https://example.com/", false},
		{"*.example.com", "https://evilexample.com/", false},
		{"example.com", "https://api.example.com/", false},
		{"example.com", "https://example.com/", true},
		{"example.com", "https://EXAMPLE.COM./x", true},
		{"example.com", "https://example.com.evil.net/", false},
		// ports
		{"example.com", "https://example.com:443/", true},
		{"example.com", "http://example.com:80/", true},
		{"example.com", "https://example.com:8443/", false},
		{"example.com", "http://example.com:443/", false},
		{"example.com:8443", "https://example.com:8443/", true},
		{"example.com:8443", "https://example.com/", false},
		{"example.com:*", "http://example.com:1/", true},
		// schemes
		{"https://example.com", "http://example.com/", false},
		{"https://example.com", "https://example.com/", true},
		{"http://example.com", "https://example.com/", false},
		// IP literal vs hostname entries
		{"127.0.0.1:*", "http://127.0.0.1:8080/", true},
		{"127.0.0.1:*", "http://localhost:8080/", false},
		{"localhost:*", "http://127.0.0.1:8080/", false},
		{"127.0.0.1:*", "http://2130706433:8080/", true}, // decimal spelling is the same address
		{"127.0.0.1:*", "http://0x7f.0.0.1:8080/", true},
		{"127.0.0.1:*", "http://0177.0.0.1:8080/", true},
		{"127.0.0.1:*", "http://127.1:8080/", true},
		{"127.0.0.1:*", "http://[::ffff:127.0.0.1]:8080/", true},
		{"10.0.0.0/8", "http://10.9.8.7/", true},
		{"10.0.0.0/8", "http://11.0.0.1/", false},
		{"[::1]:*", "http://[::1]:9/", true},
		{"[::ffff:127.0.0.1]:*", "http://127.0.0.1:9/", true},
		{"::ffff:10.0.0.0/104", "http://10.1.2.3/", true},
		{"fd00::/8", "http://[fd12::1]/", true},
		// IDNA
		{"bücher.example", "https://xn--bcher-kva.example/", true},
		{"xn--bcher-kva.example", "https://BÜCHER.example/", true},
		{"*.bücher.example", "https://shop.bücher.example/", true},
	}
	for _, c := range cases {
		p, err := ParsePolicy("allowlist", []string{c.entry})
		if err != nil {
			t.Fatalf("%s: %v", c.entry, err)
		}
		_, got := p.Match(mustOrigin(t, c.url))
		if got != c.want {
			t.Errorf("entry %q, url %q: match = %v, want %v", c.entry, c.url, got, c.want)
		}
	}
	none, _ := ParsePolicy("none", nil)
	if _, ok := none.Match(mustOrigin(t, "https://example.com/")); ok {
		t.Error("kind none matched")
	}
	any, _ := ParsePolicy("unrestricted", nil)
	if _, ok := any.Match(mustOrigin(t, "https://example.com/")); !ok {
		t.Error("kind unrestricted did not match")
	}
}

func TestParseURL(t *testing.T) {
	good := map[string]string{
		"HTTPS://Example.COM./a?b#frag":     "https://example.com/a?b",
		"http://127.1:8080/":                "http://127.0.0.1:8080/",
		"http://2130706433/":                "http://127.0.0.1/",
		"http://[::FFFF:127.0.0.1]/":        "http://[::ffff:127.0.0.1]/",
		"https://bücher.example/":           "https://xn--bcher-kva.example/",
		"http://0x7f000001/":                "http://127.0.0.1/",
		"http://example.com:8080/x%20y?z=1": "http://example.com:8080/x%20y?z=1",
	}
	for in, want := range good {
		u, _, err := ParseURL(in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", in, err)
			continue
		}
		if u.String() != want {
			t.Errorf("ParseURL(%q) = %q, want %q", in, u, want)
		}
	}
	bad := []string{
		"", "example.com", "/relative", "ftp://example.com/", "file:///etc/passwd",
		"http://allowed.example@evil.example/", "http://user:pw@example.com/",
		"http://[::1", "http://example.com:99999/", "http://example.com:0/",
		"http://256.0.0.1/", "http://1.2.3.4.5/", "http://0x1g.0.0.1/", "http://[fe80::1%25eth0]/",
		"http://exa mple.com/", "http://example.com/\r\nX: y", "http:///path", "http://:80/",
		"http://example.com:/", "gopher://x/", "http:opaque", "http://%31%32%37.0.0.1/",
	}
	for _, in := range bad {
		if u, _, err := ParseURL(in); err == nil {
			t.Errorf("ParseURL(%q) = %q, want an error", in, u)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:*", "https://[::1]:443", "10.0.0.0/8:80", "bücher.example", "a@b", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("error %v is not an *EntryError", err)
			}
			return
		}
		if e.name == "" && !e.prefix.IsValid() {
			t.Fatalf("entry %q parsed to neither a name nor an address", s)
		}
		if e.name != "" && (e.name != strings.ToLower(e.name) || strings.HasSuffix(e.name, ".")) {
			t.Fatalf("entry %q: name %q is not normalised", s, e.name)
		}
		if e.wildcard && e.name == "" {
			t.Fatalf("entry %q: wildcard without a name", s)
		}
	})
}

func FuzzURL(f *testing.F) {
	for _, s := range []string{"http://example.com/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]:80/", "https://a@b/", "https://bücher.example./x?y#z", "http://1.2.3.4.5/"} {
		f.Add(s)
	}
	pol, _ := ParsePolicy("allowlist", []string{"*.example.com", "127.0.0.1:*", "10.0.0.0/8"})
	f.Fuzz(func(t *testing.T, s string) {
		u, o, err := ParseURL(s)
		if err != nil {
			return
		}
		if u.User != nil {
			t.Fatalf("%q: userinfo survived", s)
		}
		if o.Scheme != "http" && o.Scheme != "https" {
			t.Fatalf("%q: scheme %q", s, o.Scheme)
		}
		// Normalisation is idempotent: the normalised URL parses to the
		// same origin, so policy checks on later hops agree.
		u2, o2, err := ParseURL(u.String())
		if err != nil || !o2.Same(o) || u2.String() != u.String() {
			t.Fatalf("%q -> %q -> %v %q (%v)", s, u, o2, u2, err)
		}
		_, m1 := pol.Match(o)
		_, m2 := pol.Match(o2)
		if m1 != m2 {
			t.Fatalf("%q: match differs after normalisation", s)
		}
		if o.Host.IsIP() {
			if _, ok := pol.Match(o); ok && !pol.namesAddress(o.Host.IP) {
				t.Fatalf("%q: an IP destination matched without an IP entry", s)
			}
		}
	})
}
