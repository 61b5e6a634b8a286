package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// The names where UTS #46 (golang.org/x/net/idna, hostProfile) and the
// hand-rolled mapping it replaced (NFKC, then strings.ToLower, then
// Punycode) disagreed, each with what the old code produced, and the ASCII
// rules both keep.
func TestParseHostUTS46(t *testing.T) {
	ok := []struct {
		in, want, old string
	}{
		// U+1E9E capital sharp s folds to "ss" (strings.ToLower gave ß).
		{"\u1e9e.example", "ss.example", "xn--zca.example"},
		// U+0130 folds to i + U+0307 (strings.ToLower gave a plain i: a
		// different host, "i.example", for the same name).
		{"\u0130.example", "xn--i-9bb.example", "i.example"},
		// Default ignorables are removed, as a browser does (NFKC kept them in
		// the label, or the old check refused them).
		{"exa\u00admple.com", "example.com", "xn--example-nka.com"},
		{"exa\u200bmple.com", "example.com", "refused"},
		{"a\u034fb.example", "ab.example", "xn--ab-x0b.example"},
		{"\ufe00a.example", "a.example", "xn--a-m79h.example"},
		{"exa\ufeffmple.com", "example.com", "refused"},
		// ZWJ after a virama is valid (CheckJoiners, RFC 5892 appendix A.2).
		{"\u0915\u094d\u200d.example", "xn--11b6iy14e.example", "refused"},
		// A trailing ideographic full stop is the trailing dot.
		{"example.com\u3002", "example.com", "refused"},
		// Unchanged: deviations kept (nontransitional), compatibility forms
		// and full-width dots mapped, A-labels lower-cased, ASCII rules as
		// before ('_' and any hyphens allowed).
		{"fa\u00df.de", "xn--fa-hia.de", ""},
		{"\u03a3\u0391\u03a3.gr", "xn--mxa9ab.gr", ""},
		{"\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0ecom", "example.com", ""},
		{"a\u3002b\uff61c", "a.b.c", ""},
		{"\ufb01.example", "fi.example", ""},
		{"xn--Bcher-KVA.Example", "xn--bcher-kva.example", ""},
		{"\U0001f4a9.la", "xn--ls8h.la", ""},
		{"under_score.example.com", "under_score.example.com", ""},
		{"_dmarc.example.com", "_dmarc.example.com", ""},
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com", ""},
		{"-a.example", "-a.example", ""},
	}
	for _, c := range ok {
		h, err := ParseHost(c.in)
		if err != nil {
			t.Errorf("ParseHost(%q): %v", c.in, err)
			continue
		}
		if h.IsIP() || h.Name != c.want {
			t.Errorf("ParseHost(%q) = %+v, want %q (the NFKC approximation gave %q)", c.in, h, c.want, c.old)
		}
	}

	bad := []struct{ in, reason, old string }{
		// U+2024 ONE DOT LEADER is disallowed; NFKC made it a label separator
		// ("a.b.example", another host).
		{"a\u2024b.example", "disallowed rune U+2024", "a.b.example"},
		// The Bidi rule: a label mixing left-to-right and Hebrew.
		{"a\u05d0.example", "invalid label", "xn--a-0hc.example"},
		// A label may not begin with a combining mark.
		{"\u0301a.example", "invalid label", "xn--a-wbb.example"},
		// ZWJ outside a joining context (CheckJoiners).
		{"a\u200db.example", "invalid label", "refused"},
		// xn-- labels are decoded and must be what the mapping produces.
		{"xn--zz.example", "invalid label", "xn--zz.example"},
		{"xn--a.example", "invalid label", "xn--a.example"},
		{"xn--.example", "empty label", "xn--.example"},
		// Disallowed code points.
		{"\u2488.example", "disallowed rune U+2488", "refused"},
		{"a\u0000b.example", "invalid character", "refused"},
		// Mapped to ASCII that is not a host character.
		{"a\uff0fb.example", "invalid character '/'", "refused"},
		{"\u2100.example", "invalid character '/'", "refused"},
		{"a\u00a0b.example", "invalid character ' '", "refused"},
		{"a\u3000b.example", "invalid character ' '", "refused"},
		{"exa%mple.com", "invalid character '%'", "refused"},
		// Still one trailing dot only.
		{"example.com.\u3002", "empty label", "refused"},
		{"\u3002", "empty host", "refused"},
		{"a.\u00ad.example", "empty label", "xn--..."},
	}
	for _, c := range bad {
		h, err := ParseHost(c.in)
		if err == nil {
			t.Errorf("ParseHost(%q) = %+v, want an error (%s; the NFKC approximation gave %s)", c.in, h, c.reason, c.old)
			continue
		}
		if !strings.Contains(err.Error(), c.reason) {
			t.Errorf("ParseHost(%q): %v, want %q in it", c.in, err, c.reason)
		}
	}
}

// Mapped digits and dots still spell an IP literal, which is classified as
// the address it is, never looked up as a name.
func TestParseHostUTS46IPLiterals(t *testing.T) {
	for in, want := range map[string]string{
		"\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11":                                     "127.0.0.1",
		"\u2460\u2461\u2466\u3002\u24ea\u3002\u24ea\u3002\u2460":                                     "127.0.0.1",
		"\uff10\uff58\uff17\uff46\u3002\uff11":                                                       "127.0.0.1",
		"\u2461\u2464\u2464\u3002\u2461\u2464\u2464\u3002\u2461\u2464\u2464\u3002\u2461\u2464\u2464": "255.255.255.255",
		"169.254.169.254\u3002": "169.254.169.254",
	} {
		h, err := ParseHost(in)
		if err != nil {
			t.Errorf("ParseHost(%q): %v", in, err)
			continue
		}
		if !h.IsIP() || h.IP != netip.MustParseAddr(want) {
			t.Errorf("ParseHost(%q) = %+v, want the IP %s", in, h, want)
		}
	}
}

// Allowlist entries and URLs are normalised the same way, so each spelling
// UTS #46 equates matches, and none it separates does.
func TestPolicyMatchUTS46(t *testing.T) {
	cases := []struct {
		entry, url string
		want       bool
	}{
		{"example.com", "https://exa\u00admple.com/", true},
		{"exa\u00admple.com", "https://example.com/", true},
		{"ss.example", "https://\u1e9e.example/", true},
		{"stra\u00dfe.example", "https://strasse.example/", false},
		{"i.example", "https://\u0130.example/", false},
		{"*.example.com", "https://api\uff0eexample\u3002com/", true},
		{"127.0.0.1:*", "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11:8080/", true},
	}
	for _, c := range cases {
		p, err := ParsePolicy("allowlist", []string{c.entry})
		if err != nil {
			t.Fatalf("%s: %v", c.entry, err)
		}
		_, o, err := ParseURL(c.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if _, got := p.Match(o); got != c.want {
			t.Errorf("entry %q, url %q: match = %v, want %v", c.entry, c.url, got, c.want)
		}
	}
	for _, u := range []string{"https://a\u2024b.example/", "https://a\u05d0.example/", "https://xn--zz.example/"} {
		if _, _, err := ParseURL(u); err == nil {
			t.Errorf("ParseURL(%q) accepted a name UTS #46 refuses", u)
		}
	}
}

// ParseHost's names are what ParseHost gives back unchanged: lower-case
// LDH and '_' labels within the DNS limits, whatever the input.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"b\u00fccher.example", "\u0130.example", "a\u2024b", "xn--zz", "\uff11\uff12\uff17.1", "exa\u00admple.com", "a..b", "-.-", "\u3002"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil || h.IsIP() {
			return
		}
		if len(h.Name) > maxNameLen {
			t.Fatalf("ParseHost(%q) = %q: longer than %d", s, h.Name, maxNameLen)
		}
		for l := range strings.SplitSeq(h.Name, ".") {
			if l == "" || len(l) > maxLabelLen || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				t.Fatalf("ParseHost(%q) = %q: label %q", s, h.Name, l)
			}
		}
		again, err := ParseHost(h.Name)
		if err != nil || again != h {
			t.Fatalf("ParseHost(%q) = %q, but ParseHost(%q) = %+v, %v", s, h.Name, h.Name, again, err)
		}
	})
}
