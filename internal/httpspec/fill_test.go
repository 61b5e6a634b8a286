package httpspec

// The template fills before they were metered (issue 24), kept as the
// oracles of the metered ones.

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func (ut urlTemplate) oldExpand(input map[string]any) (string, error) {
	var b strings.Builder
	var spans []filledSpan
	for i, p := range ut.params {
		b.WriteString(ut.parts[i])
		s, err := placeholderText(input, p, "urlTemplate", "", scalarString)
		if err != nil {
			return "", err
		}
		if ut.query[i] {
			// A space is %20, as Kindgi's encodeURIComponent writes it,
			// not QueryEscape's '+' (which it writes for a space only: a
			// literal '+' is %2B), so no server can read it either way.
			b.WriteString(strings.ReplaceAll(url.QueryEscape(s), "+", "%20"))
			continue
		}
		if reason := oldPathValueProblem(s); reason != "" {
			return "", &SegmentError{Param: p, Reason: reason}
		}
		start := b.Len()
		b.WriteString(url.PathEscape(s))
		spans = append(spans, filledSpan{p, start, b.Len()})
	}
	b.WriteString(ut.parts[len(ut.parts)-1])
	out := b.String()
	// The whole segment each value lands in (the template may put literal
	// text or other placeholders beside it) must still be one ordinary
	// segment: not empty, not a dot segment in any spelling.
	for _, sp := range spans {
		from := strings.LastIndexByte(out[:sp.start], '/') + 1
		to := len(out)
		if i := strings.IndexAny(out[sp.end:], "/?#"); i >= 0 {
			to = sp.end + i
		}
		if reason := oldSegmentProblem(out[from:to]); reason != "" {
			return "", &SegmentError{Param: sp.param, Reason: reason}
		}
	}
	return out, nil
}

func oldDecodeFully(s string) string {
	for range 4 {
		d, err := url.PathUnescape(s)
		if err != nil || d == s {
			return s
		}
		s = d
	}
	return s
}

func oldPathValueProblem(v string) string {
	for _, d := range []string{v, oldDecodeFully(v)} {
		if !utf8.ValidString(d) {
			return "is not valid UTF-8 once percent-decoded"
		}
		for _, f := range []string{d, norm.NFKC.String(d)} {
			if strings.ContainsAny(f, "/\\") {
				return "contains a path separator ('/' or '\\', encoded or not)"
			}
			for _, r := range f {
				if r < 0x20 || r == 0x7f {
					return "contains a control character"
				}
			}
		}
	}
	return ""
}

func oldSegmentProblem(seg string) string {
	d := oldDecodeFully(seg)
	if d == "" {
		return "is empty (it would remove a path segment)"
	}
	for _, f := range []string{d, norm.NFKC.String(d)} {
		if i := strings.IndexByte(f, ';'); i >= 0 {
			f = f[:i]
		}
		f = strings.TrimRight(f, " \t")
		if f == "" || strings.Trim(f, ".") == "" {
			return "makes a dot segment (\".\" or \"..\", encoded or not)"
		}
	}
	return ""
}

func oldHeaderValueBytes(s string) (string, string) {
	ascii := true
	for _, r := range s {
		switch {
		case r == '\t':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return "", fmt.Sprintf("contains a control character (%U); only HTAB is allowed in a header value", r)
		case r > 0xff:
			return "", fmt.Sprintf("contains %U, above U+00FF: a header value carries bytes, one per character", r)
		case r >= 0x80:
			ascii = false
		}
	}
	if ascii {
		return s, ""
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return string(b), ""
}

func (ht headerTemplate) oldFill(input map[string]any) (string, error) {
	if len(ht.params) == 0 {
		return ht.parts[0], nil
	}
	var b strings.Builder
	var filled []filledSpan
	for i, p := range ht.params {
		b.WriteString(ht.parts[i])
		s, err := placeholderText(input, p, "header "+ht.name, ht.schemaPath, headerScalar)
		if err != nil {
			return "", err
		}
		enc, reason := oldHeaderValueBytes(s)
		if reason != "" {
			return "", &HeaderValueError{Param: p, Header: ht.name, Reason: reason, SchemaPath: ht.schemaPath}
		}
		start := b.Len()
		b.WriteString(enc)
		filled = append(filled, filledSpan{p, start, b.Len()})
	}
	b.WriteString(ht.parts[len(ht.parts)-1])
	out := b.String()
	if ht.marker {
		// egress substitutes every secret placeholder in this value: each
		// must be the template's own, touching no filled text.
		for _, sp := range secretSpans(out) {
			end := sp[1]
			if end < 0 {
				end = len(out)
			}
			for _, f := range filled {
				if f.start < end && sp[0] < f.end { // an empty value strictly inside counts too
					return "", &HeaderValueError{Param: f.param, Header: ht.name, SchemaPath: ht.schemaPath,
						Reason: "would form a secret placeholder (" + secretOpen + "…" + secretClose + ") with the template's text"}
				}
			}
		}
	}
	return out, nil
}

func diffFill(t *testing.T, v string) {
	t.Helper()
	for _, tick := range []func(){nil, func() {}} {
		tk := &ticker{tick: tick}
		if got, want := pathValueProblem(v, tk), oldPathValueProblem(v); got != want {
			t.Fatalf("pathValueProblem(%q) = %q, want %q", v, got, want)
		}
		if got, want := segmentProblem(v, tk), oldSegmentProblem(v); got != want {
			t.Fatalf("segmentProblem(%q) = %q, want %q", v, got, want)
		}
		if got, want := decodeFully(v, tk), oldDecodeFully(v); got != want {
			t.Fatalf("decodeFully(%q) = %q, want %q", v, got, want)
		}
		got, gr := headerValueBytes(v, tk)
		want, wr := oldHeaderValueBytes(v)
		if got != want || gr != wr {
			t.Fatalf("headerValueBytes(%q) = %q %q, want %q %q", v, got, gr, want, wr)
		}
		var sb strings.Builder
		for seg := range nfkc(v, tk) {
			sb.Write(seg)
		}
		if utf8.ValidString(v) && sb.String() != norm.NFKC.String(v) {
			t.Fatalf("nfkc(%q) = %q, want %q", v, sb.String(), norm.NFKC.String(v))
		}
		for _, tmpl := range []string{"http://a.test/x/{p}/y?q={q}", "http://a.test/{p}{q}", "http://a.test/a{p}.{q}b?z"} {
			ut, _, err := parseURLTemplate(tmpl)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range []map[string]any{{"p": v, "q": v}, {"p": "x", "q": v}, {"p": v, "q": "."}} {
				got, gerr := ut.expand(in, tk)
				want, werr := ut.oldExpand(in)
				if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("%s with %q: %q %v, want %q %v", tmpl, in, got, gerr, want, werr)
				}
			}
		}
		ht, err := parseHeaderTemplate(0, "X", "a{h}b{{secret:K}}")
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []headerTemplate{ht, {name: "Y", parts: []string{"", ""}, params: []string{"h"}}} {
			got, gerr := tt.fill(map[string]any{"h": v}, tk)
			want, werr := tt.oldFill(map[string]any{"h": v})
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("header %q with %q: %q %v, want %q %v", tt.parts, v, got, gerr, want, werr)
			}
		}
	}
}

var fillSeeds = []string{"", "a", ".", "..", "...", ".. ", "..;x", ". .", "%2e%2E", "%2e%2", "%", "%zz", "%252e%252e", "%25252e",
	"\uff0e\uff0e", "\uff0f", "a/b", "a\\b", "%2F", "%5c", "\x00", "\x7f", "\u0085", "é", "\xff", "%ff", "a b", "\t",
	"\u00a0x", "\u0100", "{{secret:K}}", "}}", "{{secret:", "\ufdfa", "\u2024\u2024", "%E2%80%A4%E2%80%A4", "x;..", ". \t;", "\ufe52"}

func TestFillMatchesOld(t *testing.T) {
	for _, v := range fillSeeds {
		diffFill(t, v)
	}
	big := strings.Repeat("ab%2e\uff0e é/", 20000)
	diffFill(t, big)
	diffFill(t, strings.Repeat(".", 200000)+";")
}

func TestFillMatchesOldTicking(t *testing.T) {
	old := tickBytes
	tickBytes = 1
	defer func() { tickBytes = old }()
	for _, v := range fillSeeds {
		diffFill(t, v)
	}
	diffFill(t, strings.Repeat("ab%2e\uff0e é/", 200))
}

func FuzzFillMatchesOld(f *testing.F) {
	for _, v := range fillSeeds {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) { diffFill(t, v) })
}
