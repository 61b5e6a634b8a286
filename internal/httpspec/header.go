package httpspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	"github.com/sandboxd/sandboxd/internal/rawbuf"
)

// headerTemplate is a spec header value split at its {param} placeholders.
// Like Kindgi's substituteTemplate (packages/tools/src/http.ts), every
// match of \{(\w+)\} (ASCII letters, digits, '_') is a placeholder, filled
// unencoded from the input key of that name; "{a-b}", "{a.b}", "{}" and a
// secret placeholder "{{secret:NAME}}" are literal text. Header names are
// never templated, and filled keys stay in a json-input body (only
// urlTemplate keys are consumed there, as in Kindgi).
type headerTemplate struct {
	name   string
	parts  []string // literal text; len(parts) == len(params)+1
	params []string
	// marker: the literal text holds a secret placeholder, substituted by
	// egress host-side; fill then checks that the input forms no other.
	marker     bool
	schemaPath string // #/spec/headers/<i>/value
}

var headerPlaceholderRe = regexp.MustCompile(`\{(\w+)\}`)

const secretOpen, secretClose = "{{secret:", "}}" // egress.SecretPlaceholder's syntax

// parseHeaderTemplate splits a spec header value. A header that has both
// placeholders and a secret placeholder must keep each secret placeholder
// whole inside one run of literal text: "{{secret:{name}}}" would let the
// input choose the secret.
func parseHeaderTemplate(i int, name, value string) (headerTemplate, error) {
	ht := headerTemplate{name: name, schemaPath: fmt.Sprintf("#/spec/headers/%d/value", i), marker: strings.Contains(value, secretOpen)}
	last := 0
	for _, m := range headerPlaceholderRe.FindAllStringSubmatchIndex(value, -1) {
		ht.parts = append(ht.parts, value[last:m[0]])
		ht.params = append(ht.params, value[m[2]:m[3]])
		last = m[1]
	}
	ht.parts = append(ht.parts, value[last:])
	if ht.marker && len(ht.params) > 0 {
		for _, p := range ht.parts {
			for _, sp := range secretSpans(p) {
				if sp[1] < 0 {
					return ht, errors.New("a secret placeholder must be whole literal text, not split by a {param} placeholder")
				}
			}
		}
	}
	return ht, nil
}

// secretSpans finds the secret placeholders in v as egress substitutes
// them (each "{{secret:" up to the next "}}"): [start, end) pairs, end -1
// for one left open.
func secretSpans(v string) [][2]int {
	var out [][2]int
	for off := 0; ; {
		i := strings.Index(v[off:], secretOpen)
		if i < 0 {
			return out
		}
		j := strings.Index(v[off+i:], secretClose)
		if j < 0 {
			return append(out, [2]int{off + i, -1})
		}
		out = append(out, [2]int{off + i, off + i + j + len(secretClose)})
		off += i + j + len(secretClose)
	}
}

// HeaderValueError is an input value that cannot go in a header.
type HeaderValueError struct {
	Param      string // the placeholder
	Header     string // the header's name
	Reason     string // why the value cannot go in a header value
	SchemaPath string // #/spec/headers/<i>/value
}

func (e *HeaderValueError) Error() string {
	return fmt.Sprintf("header %s's {%s}: the value %s", e.Header, e.Param, e.Reason)
}

// fill fills the template from the input object. A missing key, null, an
// object or an array is a *FillError (the URL placeholders' rules, where
// Kindgi sends "{key}", "" or String(value)); a value that is not valid in
// a header value is a *HeaderValueError, never sent.
// Its passes over a value run a chunk at a time, counted on tk.
func (ht headerTemplate) fill(input map[string]any, tk *ticker) (string, error) {
	if len(ht.params) == 0 {
		return ht.parts[0], nil
	}
	var b strings.Builder
	n := 0 // room up front, as expand's
	for i, p := range ht.params {
		n += len(ht.parts[i])
		if s, ok := input[p].(string); ok {
			n += len(s)
		} else {
			n += 64
		}
	}
	b.Grow(n + len(ht.parts[len(ht.parts)-1]))
	var filled []filledSpan
	for i, p := range ht.params {
		b.WriteString(ht.parts[i])
		s, err := placeholderText(input, p, "header "+ht.name, ht.schemaPath, headerScalar)
		if err != nil {
			return "", err
		}
		enc, reason := headerValueBytes(s, tk)
		if reason != "" {
			return "", &HeaderValueError{Param: p, Header: ht.name, Reason: reason, SchemaPath: ht.schemaPath}
		}
		start := b.Len()
		for c := range chunks(enc) {
			b.WriteString(c)
			tk.did(len(c))
		}
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

// headerScalar is String(value) in Kindgi's JavaScript for a string,
// number or boolean.
func headerScalar(v any) (string, error) {
	if n, ok := v.(json.Number); ok {
		return jsNumberString(string(n)), nil
	}
	return scalarString(v)
}

// headerValueBytes returns s as header value bytes, or why it cannot be
// one. Like the ByteString fetch sends, each character is one byte: U+00A0
// to U+00FF go out as their ISO-8859-1 byte; a character above U+00FF
// (where fetch throws) is refused. Refused too: every control character
// but HTAB — CR, LF, NUL, DEL, U+0080 to U+009F — which fetch would refuse
// (CR, LF, NUL) or send.
func headerValueBytes(s string, tk *ticker) (string, string) {
	ascii := true
	next := tickBytes
	for i, r := range s {
		if i >= next {
			tk.did(i - next + tickBytes)
			next = i + tickBytes
		}
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
	b := rawbuf.Uncleared(len(s))
	next = tickBytes
	for i, r := range s {
		if i >= next {
			tk.did(i - next + tickBytes)
			next = i + tickBytes
		}
		b = append(b, byte(r))
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), "" // b is not written again
}

// jsNumberString is JavaScript's String(n) of the JSON number text n (the
// Number it parses to, shortest round-trip digits, ECMAScript's
// Number::toString layout): "1.50" → "1.5", "1e2" → "100", "1e21" →
// "1e+21", "0.0000001" → "1e-7", "-0" → "0".
func jsNumberString(n string) string {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return n
	}
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k, p := len(digits), x+1 // the value is 0.digits × 10^p
	switch {
	case k <= p && p <= 21:
		return sign + digits + strings.Repeat("0", p-k)
	case 0 < p && p <= 21:
		return sign + digits[:p] + "." + digits[p:]
	case -6 < p && p <= 0:
		return sign + "0." + strings.Repeat("0", -p) + digits
	}
	es := "+"
	if p-1 < 0 {
		es = "-"
	}
	ex := strconv.Itoa(p - 1)
	if p-1 < 0 {
		ex = strconv.Itoa(1 - p)
	}
	if k == 1 {
		return sign + digits + "e" + es + ex
	}
	return sign + digits[:1] + "." + digits[1:] + "e" + es + ex
}
