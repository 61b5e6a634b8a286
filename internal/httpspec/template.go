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

	"golang.org/x/text/unicode/norm"

	"github.com/sandboxd/sandboxd/egress"
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
func (ut urlTemplate) expand(input map[string]any) (string, error) {
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
		if reason := pathValueProblem(s); reason != "" {
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
		if reason := segmentProblem(out[from:to]); reason != "" {
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

// decodeFully percent-decodes s until it stops changing (at most 4 rounds,
// for servers and proxies that decode more than once); an invalid escape
// ends the decoding where it is.
func decodeFully(s string) string {
	for range 4 {
		d, err := url.PathUnescape(s)
		if err != nil || d == s {
			return s
		}
		s = d
	}
	return s
}

// pathValueProblem says why a path placeholder value is refused, or "".
// It looks at the value as written and fully decoded, also after Unicode
// compatibility normalisation (fullwidth "／", "．"): no '/' or '\'
// (%2F, %5C), no control characters, valid UTF-8.
func pathValueProblem(v string) string {
	for _, d := range []string{v, decodeFully(v)} {
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

// segmentProblem says why an expanded path segment is refused, or "": empty
// (a server may collapse "//", removing a segment), or a dot segment in any
// spelling once decoded and normalised — ".", "..", "%2e%2E", "．．", "..;x"
// (servlet path parameters), ".. " or "..." (trimmed by some file systems).
func segmentProblem(seg string) string {
	d := decodeFully(seg)
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
