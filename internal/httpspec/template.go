package httpspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/text/unicode/norm"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/rawbuf"
)

// FillError is a placeholder the input cannot fill: missing, null, or not
// a string, number or boolean.
type FillError struct {
	Param      string // the placeholder
	Missing    bool   // the input has no such key (else its value is not a scalar)
	SchemaPath string // where the placeholder is; "" for #/spec/urlTemplate
	msg        string
}

func (e *FillError) Error() string { return e.msg }

// urlTemplate is a URL split at its {param} placeholders.
type urlTemplate struct {
	parts  []string // literal text; len(parts) == len(params)+1
	params []string
	query  []bool // whether params[i] is in the query (else the path)
}

var placeholderName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// parseURLTemplate splits a template and checks that every placeholder is
// in the path or query — never the scheme, userinfo, host or port — and
// that the rest is an absolute http(s) URL. It returns the origin.
func parseURLTemplate(t string) (urlTemplate, egress.Origin, error) {
	var ut urlTemplate
	schemeEnd := strings.Index(t, "://")
	if schemeEnd < 0 {
		return ut, egress.Origin{}, errors.New("not an absolute http or https URL")
	}
	authEnd := len(t)
	if i := strings.IndexAny(t[schemeEnd+3:], "/?#"); i >= 0 {
		authEnd = schemeEnd + 3 + i
	}
	queryStart := strings.IndexByte(t, '?')
	rest := t
	pos := 0
	for {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			ut.parts = append(ut.parts, rest)
			break
		}
		if rest[i] == '}' {
			return ut, egress.Origin{}, fmt.Errorf("unbalanced '}' at %d", pos+i)
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return ut, egress.Origin{}, fmt.Errorf("unterminated placeholder at %d", pos+i)
		}
		name := rest[i+1 : i+j]
		if !placeholderName.MatchString(name) {
			return ut, egress.Origin{}, fmt.Errorf("invalid placeholder {%s}", name)
		}
		if pos+i < authEnd {
			return ut, egress.Origin{}, fmt.Errorf("placeholder {%s} is in the scheme, userinfo, host or port; placeholders may appear only in the path or query", name)
		}
		if strings.Contains(t[:pos+i], "#") {
			return ut, egress.Origin{}, fmt.Errorf("placeholder {%s} is in the fragment", name)
		}
		ut.parts = append(ut.parts, rest[:i])
		ut.params = append(ut.params, name)
		ut.query = append(ut.query, queryStart >= 0 && pos+i > queryStart)
		rest = rest[i+j+1:]
		pos += i + j + 1
	}
	_, o, err := egress.ParseURL(strings.Join(ut.parts, "x"))
	if err != nil {
		return ut, egress.Origin{}, err
	}
	return ut, o, nil
}

// expand fills the template from the input object; values are
// percent-encoded for their position. A path placeholder's value always
// stays inside its one segment of the template's path: a value that could
// add, remove or climb segments once a server or proxy decodes and
// normalises the path is refused with a *SegmentError (F10).
//
// Its passes over a value run a chunk of at most tickBytes at a time, tk
// counting each.
func (ut urlTemplate) expand(input map[string]any, tk *ticker) (string, error) {
	var b strings.Builder
	// Room for the whole URL up front (a value escapes to at most 3 bytes
	// a byte): a builder's own growth copies the URL in one step no tick
	// divides; the room is not cleared, and pages only written are used.
	n := 0
	for i, p := range ut.params {
		n += len(ut.parts[i])
		if s, ok := input[p].(string); ok {
			n += 3 * len(s)
		} else {
			n += 64 // a number or boolean
		}
	}
	b.Grow(n + len(ut.parts[len(ut.parts)-1]))
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
			// (Both escape byte by byte: a chunk at a time is the same.)
			for c := range chunks(s) {
				b.WriteString(strings.ReplaceAll(url.QueryEscape(c), "+", "%20"))
				tk.did(3 * len(c))
			}
			continue
		}
		if reason := pathValueProblem(s, tk); reason != "" {
			return "", &SegmentError{Param: p, Reason: reason}
		}
		start := b.Len()
		for c := range chunks(s) {
			b.WriteString(url.PathEscape(c))
			tk.did(3 * len(c))
		}
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
		if reason := segmentProblem(out[from:to], tk); reason != "" {
			return "", &SegmentError{Param: sp.param, Reason: reason}
		}
	}
	return out, nil
}

// filledSpan is where a placeholder's value landed in a filled template.
type filledSpan struct {
	param      string
	start, end int
}

// SegmentError is a path placeholder value that would change the path's
// segments.
type SegmentError struct {
	Param  string // the placeholder
	Reason string // what the value would do to the path
}

func (e *SegmentError) Error() string {
	return fmt.Sprintf("{%s}: the value %s; a path placeholder fills exactly one path segment", e.Param, e.Reason)
}

// ticker counts a pass's work, calling tick (nil: none) every tickBytes.
type ticker struct {
	tick func()
	n    int
}

func (t *ticker) did(n int) {
	if t == nil || t.tick == nil {
		return
	}
	t.n += n
	if t.n >= tickBytes {
		t.n = 0
		t.tick()
	}
}

// chunks yields s in pieces of at most tickBytes bytes.
func chunks(s string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			k := min(len(s), tickBytes)
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// decodeFully percent-decodes s until it stops changing (at most 4 rounds,
// for servers and proxies that decode more than once); an invalid escape
// ends the decoding where it is.
func decodeFully(s string, tk *ticker) string {
	for range 4 {
		d, ok := pathUnescape(s, tk)
		if !ok || len(d) == len(s) { // a round that decodes shortens s
			return s
		}
		s = d
	}
	return s
}

// pathUnescape is url.PathUnescape(s) (ok false for its error), counted on
// tk.
func pathUnescape(s string, tk *ticker) (string, bool) {
	n := 0
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:min(len(s), i+tickBytes)], '%')
		if j < 0 {
			tk.did(min(len(s), i+tickBytes) - i)
			i += tickBytes
			continue
		}
		i += j
		tk.did(j + 3)
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", false
		}
		n++
		i += 3
	}
	if n == 0 {
		return s, true
	}
	b := rawbuf.Uncleared(len(s) - 2*n)
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:min(len(s), i+tickBytes)], '%')
		if j < 0 {
			k := min(len(s), i+tickBytes)
			b = append(b, s[i:k]...)
			tk.did(k - i)
			i = k
			continue
		}
		b = append(b, s[i:i+j]...)
		i += j
		b = append(b, byte(hex4([]byte{'0', '0', s[i+1], s[i+2]})))
		tk.did(j + 3)
		i += 3
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true // b is not written again
}

// validUTF8 is utf8.ValidString(s), a chunk at a time (cut where a rune
// starts: a sequence cut there is invalid whole too).
func validUTF8(s string, tk *ticker) bool {
	for len(s) > 0 {
		k := min(len(s), tickBytes)
		for k < len(s) && !utf8.RuneStart(s[k]) {
			k++
		}
		if !utf8.ValidString(s[:k]) {
			return false
		}
		tk.did(k)
		s = s[k:]
	}
	return true
}

// nfkc yields the NFKC form of s (norm.NFKC.String(s)) in pieces, without
// building it, counted on tk.
func nfkc(s string, tk *ticker) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		var it norm.Iter
		it.InitString(norm.NFKC, s)
		for !it.Done() {
			seg := it.Next()
			tk.did(len(seg) + 4) // a segment's work, beyond its bytes
			if !yield(seg) {
				return
			}
		}
	}
}

// runProblem says why one form of a path value is refused, or "": a path
// separator or a control character (bytes: a control character is one
// byte in UTF-8, and no byte of a longer sequence is one). It is fed the
// form piece by piece; sep and ctl record what it saw.
type runProblem struct{ sep, ctl bool }

func feedRun[S string | []byte](p *runProblem, b S) {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '/' || c == '\\':
			p.sep = true
		case c < 0x20 || c == 0x7f:
			p.ctl = true
		}
	}
}

func (p *runProblem) reason() string {
	switch {
	case p.sep:
		return "contains a path separator ('/' or '\\', encoded or not)"
	case p.ctl:
		return "contains a control character"
	}
	return ""
}

// pathValueProblem says why a path placeholder value is refused, or "".
// It looks at the value as written and fully decoded, also after Unicode
// compatibility normalisation (fullwidth "／", "．"): no '/' or '\'
// (%2F, %5C), no control characters, valid UTF-8. Every pass runs a
// chunk at a time, counted on tk.
func pathValueProblem(v string, tk *ticker) string {
	for round := range 2 {
		d := v
		if round == 1 {
			d = decodeFully(v, tk)
		}
		if !validUTF8(d, tk) {
			return "is not valid UTF-8 once percent-decoded"
		}
		var p runProblem
		for c := range chunks(d) {
			feedRun(&p, c)
			tk.did(len(c))
		}
		if r := p.reason(); r != "" {
			return r
		}
		for seg := range nfkc(d, tk) {
			feedRun(&p, seg)
		}
		if r := p.reason(); r != "" {
			return r
		}
	}
	return ""
}

// segmentProblem says why an expanded path segment is refused, or "": empty
// (a server may collapse "//", removing a segment), or a dot segment in any
// spelling once decoded and normalised — ".", "..", "%2e%2E", "．．", "..;x"
// (servlet path parameters), ".. " or "..." (trimmed by some file systems).
func segmentProblem(seg string, tk *ticker) string {
	d := decodeFully(seg, tk)
	if d == "" {
		return "is empty (it would remove a path segment)"
	}
	// A dot segment: before any ';', once " " and "\t" are trimmed from
	// its end, only dots (or nothing): dots, then only spaces and tabs.
	var ds dotSegment
	for c := range chunks(d) {
		tk.did(len(c))
		if !feedDots(&ds, c) {
			break
		}
	}
	if ds.is() {
		return "makes a dot segment (\".\" or \"..\", encoded or not)"
	}
	ds = dotSegment{}
	for seg := range nfkc(d, tk) {
		if !feedDots(&ds, seg) {
			break
		}
	}
	if ds.is() {
		return "makes a dot segment (\".\" or \"..\", encoded or not)"
	}
	return ""
}

// dotSegment matches, piece by piece, what strings.TrimRight(f[:';'],
// " \t") leaves only dots of (nothing included): `^\.*[ \t]*(;|$)`.
type dotSegment struct {
	spaces bool // past the dots
	no     bool // it does not match
	done   bool // a ';' ended it
}

// feed takes the next piece; false once the answer is known.
func feedDots[S string | []byte](d *dotSegment, b S) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case d.no || d.done:
			return false
		case c == ';':
			d.done = true
		case c == '.' && !d.spaces:
		case c == ' ' || c == '\t':
			d.spaces = true
		default:
			d.no = true
		}
	}
	return !d.no && !d.done
}

func (d *dotSegment) is() bool { return !d.no }

// placeholderText is input[p] as format writes it, or a *FillError for a
// missing key or a value that is not a string, number or boolean; where
// names the template in the message, schemaPath its place ("" for
// #/spec/urlTemplate).
func placeholderText(input map[string]any, p, where, schemaPath string, format func(any) (string, error)) (string, error) {
	v, ok := input[p]
	if !ok {
		return "", &FillError{Param: p, Missing: true, SchemaPath: schemaPath, msg: fmt.Sprintf("%s references {%s} but the input has no such key", where, p)}
	}
	s, err := format(v)
	if err != nil {
		return "", &FillError{Param: p, SchemaPath: schemaPath, msg: fmt.Sprintf("%s key {%s} must be a primitive (a string, number or boolean); got %s", where, p, jsonTypeName(v))}
	}
	return s, nil
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", errors.New("only strings, numbers and booleans can fill a placeholder")
}

// jsonTypeName is the JSON type of a decoded value (UseNumber).
func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}

// placeholderRe is a text body template's placeholder (fillText's).
var placeholderRe = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_.-]*\}`)
