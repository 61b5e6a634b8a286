package httpspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/rawbuf"
)

// tickBytes is the most work (bytes read plus bytes written) Body does
// between two meter points (a test sets it to 1).
var tickBytes = 64 << 10

// Meter is how a caller meters the building of a request body (the call's
// host work). At every meter point — after at most tickBytes bytes of
// work, and once at the end — Body first calls Grow with the bytes the
// body grew by since the last one (false refuses them: Body stops with a
// *BodyTooLargeError), then, but not at the end, Tick, which may panic to
// stop the build (the panic passes through Body). Either may be nil.
type Meter struct {
	Tick func()
	Grow func(n int) bool
}

// BodyTooLargeError is a body whose growth the Meter refused.
type BodyTooLargeError struct {
	Size int // the body's size when its growth was refused
}

func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("the request body (%d bytes so far) is too large", e.Size)
}

// builder is a body being built under a Meter.
type builder struct {
	out      []byte
	m        Meter
	work     int // since the last meter point
	reserved int // len(out) at the last meter point
}

// buildStop carries a builder's own stop out of a pass.
type buildStop struct{ err error }

// grow charges the body's growth since the last meter point.
func (b *builder) grow() {
	if n := len(b.out) - b.reserved; n > 0 && b.m.Grow != nil {
		if !b.m.Grow(n) {
			panic(buildStop{&BodyTooLargeError{Size: len(b.out)}})
		}
	}
	b.reserved = len(b.out)
}

// did counts n bytes of work, reaching a meter point every tickBytes.
func (b *builder) did(n int) {
	b.work += n
	if b.work >= tickBytes {
		b.grow()
		b.work = 0
		b.tick()
		b.room()
	}
}

func (b *builder) tick() {
	if b.m.Tick != nil {
		b.m.Tick()
	}
}

// room makes sure b.out has room for what the passes append until the
// next meter point (at most about 2×tickBytes: every byte appended is
// counted as work, but for a few separators): append's own growth would
// copy the whole body in one step no tick divides. The copy into the
// larger buffer ticks every tickBytes.
func (b *builder) room() {
	want := 4 * tickBytes
	if cap(b.out)-len(b.out) >= want {
		return
	}
	nb := rawbuf.Uncleared(max(2*cap(b.out), len(b.out)+want))
	for i := 0; i < len(b.out); i += tickBytes {
		nb = append(nb, b.out[i:min(len(b.out), i+tickBytes)]...)
		b.tick()
	}
	b.out = nb
}

// write appends s a tickBytes chunk at a time, each chunk counted.
func (b *builder) write(s string) {
	for len(s) > 0 {
		k := min(len(s), tickBytes)
		b.out = append(b.out, s[:k]...)
		s = s[k:]
		b.did(k)
	}
}

// build runs fn, which fills b.out, and returns b.out once its last growth
// is charged, or the builder's own stop (a Meter's panic passes through).
func (b *builder) build(fn func() error) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(buildStop)
			if !ok {
				panic(r)
			}
			out, err = nil, s.err
		}
	}()
	if err := fn(); err != nil {
		return nil, err
	}
	b.grow()
	if len(b.out) == 0 {
		return nil, nil
	}
	return b.out, nil
}

var (
	errNotObject = errors.New("the input is not a JSON object")
	errEnd       = errors.New("unexpected end of JSON input")
)

// scan reads a JSON document, copying it compact (json.Compact's bytes:
// insignificant whitespace elided, everything else as written) where told
// to, and checking its syntax (RFC 8259; string bytes not checked as
// UTF-8, as encoding/json's scanner does not).
type scan struct {
	*builder
	d []byte
	i int
}

func (s *scan) syntax(what string) error {
	if s.i >= len(s.d) {
		return errEnd
	}
	return fmt.Errorf("invalid character %q %s (offset %d)", s.d[s.i], what, s.i)
}

// ws skips whitespace.
func (s *scan) ws() {
	for s.i < len(s.d) {
		switch s.d[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			s.did(1)
		default:
			return
		}
	}
}

// take copies d[from:s.i] (when emit) and counts it.
func (s *scan) take(emit bool, from int) {
	if emit {
		s.out = append(s.out, s.d[from:s.i]...)
	}
	s.did(s.i - from)
}

// byte1 consumes the byte c at s.i.
func (s *scan) byte1(emit bool, c byte) {
	s.i++
	if emit {
		s.out = append(s.out, c)
	}
	s.did(1)
}

// str reads the string at s.i (its opening quote).
func (s *scan) str(emit bool) error {
	d := s.d
	from := s.i
	s.i++
	for {
		end := min(len(d), s.i+tickBytes)
		for s.i < end {
			if c := d[s.i]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			s.i++
		}
		if s.i >= len(d) {
			return errEnd
		}
		switch c := d[s.i]; {
		case c == '"':
			s.i++
			s.take(emit, from)
			return nil
		case c == '\\':
			if s.i+1 >= len(d) {
				s.i = len(d)
				return errEnd
			}
			switch d[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				for k := 2; k < 6; k++ {
					if s.i+k >= len(d) {
						s.i = len(d)
						return errEnd
					}
					if !isHex(d[s.i+k]) {
						s.i += k
						return s.syntax("in \\u hexadecimal character escape")
					}
				}
				s.i += 6
			default:
				s.i++
				return s.syntax("in string escape code")
			}
		case c < 0x20:
			return s.syntax("in string literal")
		}
		s.take(emit, from) // a chunk's end
		from = s.i
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// digits reads a run of at least one digit, a chunk at a time.
func (s *scan) digits(emit bool) error {
	if s.i >= len(s.d) || s.d[s.i] < '0' || s.d[s.i] > '9' {
		return s.syntax("in numeric literal")
	}
	for {
		from := s.i
		end := min(len(s.d), s.i+tickBytes)
		for s.i < end && s.d[s.i] >= '0' && s.d[s.i] <= '9' {
			s.i++
		}
		s.take(emit, from)
		if s.i < end || s.i >= len(s.d) {
			return nil
		}
	}
}

// number reads the number at s.i.
func (s *scan) number(emit bool) error {
	d := s.d
	if d[s.i] == '-' {
		s.byte1(emit, '-')
	}
	if s.i < len(d) && d[s.i] == '0' {
		s.byte1(emit, '0')
	} else if err := s.digits(emit); err != nil {
		return err
	}
	if s.i < len(d) && d[s.i] == '.' {
		s.byte1(emit, '.')
		if err := s.digits(emit); err != nil {
			return err
		}
	}
	if s.i < len(d) && (d[s.i] == 'e' || d[s.i] == 'E') {
		s.byte1(emit, d[s.i])
		if s.i < len(d) && (d[s.i] == '+' || d[s.i] == '-') {
			s.byte1(emit, d[s.i])
		}
		if err := s.digits(emit); err != nil {
			return err
		}
	}
	return nil
}

// member reads an object member's key and colon (at s.i, after any
// whitespace).
func (s *scan) member(emit bool) error {
	s.ws()
	if s.i >= len(s.d) || s.d[s.i] != '"' {
		return s.syntax("looking for beginning of object key string")
	}
	if err := s.str(emit); err != nil {
		return err
	}
	s.ws()
	if s.i >= len(s.d) || s.d[s.i] != ':' {
		return s.syntax("after object key")
	}
	s.byte1(emit, ':')
	return nil
}

// value reads one JSON value at s.i (whitespace around it skipped),
// iteratively: a stack of its open containers.
func (s *scan) value(emit bool) error {
	d := s.d
	var stack []byte // '{' or '['
	for {
		s.ws()
		if s.i >= len(d) {
			return errEnd
		}
		switch c := d[s.i]; {
		case c == '{' || c == '[':
			s.byte1(emit, c)
			s.ws()
			if s.i < len(d) && d[s.i] == c+2 { // '}' or ']'
				s.byte1(emit, c+2)
				break // an empty container: a value
			}
			stack = append(stack, c)
			if c == '{' {
				if err := s.member(emit); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if err := s.str(emit); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if err := s.number(emit); err != nil {
				return err
			}
		case c == 't' || c == 'f' || c == 'n':
			lit := "null"
			switch c {
			case 't':
				lit = "true"
			case 'f':
				lit = "false"
			}
			if !strings.HasPrefix(string(d[s.i:min(len(d), s.i+len(lit))]), lit) {
				return s.syntax("in literal " + lit)
			}
			from := s.i
			s.i += len(lit)
			s.take(emit, from)
		default:
			return s.syntax("looking for beginning of value")
		}
		// A value ended: close the containers it ends.
		for {
			if len(stack) == 0 {
				return nil
			}
			s.ws()
			if s.i >= len(d) {
				return errEnd
			}
			top := stack[len(stack)-1]
			c := d[s.i]
			if c == top+2 {
				s.byte1(emit, c)
				stack = stack[:len(stack)-1]
				continue
			}
			if c != ',' {
				if top == '{' {
					return s.syntax("after object key:value pair")
				}
				return s.syntax("after array element")
			}
			s.byte1(emit, ',')
			if top == '{' {
				if err := s.member(emit); err != nil {
					return err
				}
			}
			break
		}
	}
}

// end checks that only whitespace is left.
func (s *scan) end() error {
	s.ws()
	if s.i < len(s.d) {
		return s.syntax("after top-level value")
	}
	return nil
}

// compactJSON is json.Compact of raw, metered by m.
func compactJSON(raw []byte, m Meter) ([]byte, error) {
	b := &builder{m: m, out: rawbuf.Uncleared(len(raw))} // never longer
	return b.build(func() error {
		s := &scan{builder: b, d: raw}
		if err := s.value(true); err != nil {
			return err
		}
		return s.end()
	})
}

// jsonObjectWithout re-encodes the JSON object raw, compact, without its
// top-level keys in drop, the others in their order (JSON.stringify of
// Kindgi's "rest" object): each kept key as json.Marshal writes the string
// it decodes to (encoding/json's escaping, <, > and & as \u003c...: the
// same string to a JSON parser), each value as json.Compact writes it. It
// returns nil when no key is left. One pass, metered by m.
func jsonObjectWithout(raw []byte, drop map[string]bool, m Meter) ([]byte, error) {
	// Longer than raw only by escapes json.Marshal adds to keys.
	b := &builder{m: m, out: rawbuf.Uncleared(len(raw))}
	var key []byte
	return b.build(func() error {
		s := &scan{builder: b, d: raw}
		d := raw
		s.ws()
		if s.i >= len(d) || d[s.i] != '{' {
			return errNotObject
		}
		s.i++
		s.did(1)
		s.ws()
		if s.i < len(d) && d[s.i] == '}' {
			s.i++
			return s.end()
		}
		for {
			s.ws()
			if s.i >= len(d) || d[s.i] != '"' {
				return s.syntax("looking for beginning of object key string")
			}
			from := s.i
			if err := s.str(false); err != nil {
				return err
			}
			if q := s.i - from - 2; cap(key) < q {
				key = rawbuf.Uncleared(q) // decoded, no longer but for invalid UTF-8
			}
			key = unquoteKey(key[:0], d[from+1:s.i-1], b)
			s.ws()
			if s.i >= len(d) || d[s.i] != ':' {
				return s.syntax("after object key")
			}
			s.i++
			s.did(1)
			keep := !drop[string(key)]
			if keep {
				if len(b.out) == 0 {
					b.out = append(b.out, '{')
				} else {
					b.out = append(b.out, ',')
				}
				appendMarshalString(b, key)
				b.out = append(b.out, ':')
			}
			if err := s.value(keep); err != nil {
				return err
			}
			s.ws()
			if s.i >= len(d) {
				return errEnd
			}
			if d[s.i] == '}' {
				s.i++
				break
			}
			if d[s.i] != ',' {
				return s.syntax("after object key:value pair")
			}
			s.i++
			s.did(1)
		}
		if err := s.end(); err != nil {
			return err
		}
		if len(b.out) > 0 {
			b.out = append(b.out, '}')
		}
		return nil
	})
}

// unquoteKey appends to dst the string the JSON string contents q (checked
// by scan.str) decode to, as encoding/json decodes them: invalid UTF-8 and
// unpaired surrogate escapes become U+FFFD. Its work is counted on b.
func unquoteKey(dst, q []byte, b *builder) []byte {
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\':
			switch q[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(q[i+2 : i+6])
				i += 6
				b.did(6)
				if utf16.IsSurrogate(r) {
					if i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, hex4(q[i+2:i+6])); dec != utf8.RuneError {
							dst = utf8.AppendRune(dst, dec)
							i += 6
							b.did(6)
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, q[i+1])
			}
			i += 2
			b.did(2)
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
			b.did(1)
		default:
			r, size := utf8.DecodeRune(q[i:])
			dst = utf8.AppendRune(dst, r) // RuneError for an invalid byte
			i += size
			b.did(size)
		}
	}
	return dst
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendMarshalString appends str as json.Marshal writes a string (HTML
// escaping on) to b.out, its work counted.
func appendMarshalString[S []byte | string](b *builder, str S) {
	const hex = "0123456789abcdef"
	b.out = append(b.out, '"')
	start := 0
	flush := func(i int) {
		b.out = append(b.out, str[start:i]...)
		b.did(i - start)
		start = i
	}
	for i := 0; i < len(str); {
		if i-start >= tickBytes {
			flush(i)
		}
		c := str[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			flush(i)
			switch c {
			case '\\', '"':
				b.out = append(b.out, '\\', c)
			case '\b':
				b.out = append(b.out, '\\', 'b')
			case '\f':
				b.out = append(b.out, '\\', 'f')
			case '\n':
				b.out = append(b.out, '\\', 'n')
			case '\r':
				b.out = append(b.out, '\\', 'r')
			case '\t':
				b.out = append(b.out, '\\', 't')
			default:
				b.out = append(b.out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			b.did(6)
			continue
		}
		r, size := utf8.DecodeRuneInString(string(str[i:min(len(str), i+utf8.UTFMax)]))
		switch {
		case r == utf8.RuneError && size == 1:
			flush(i)
			b.out = append(b.out, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			flush(i)
			b.out = append(b.out, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
		b.did(6)
	}
	flush(len(str))
	b.out = append(b.out, '"')
}

// appendMarshal appends json.Marshal(v) for a decoded value (manifest's
// DecodeValue: map[string]any, []any, string, json.Number, bool, nil) to
// b.out, its work counted: map keys sorted, strings as appendMarshalString.
func appendMarshal(b *builder, v any) {
	switch x := v.(type) {
	case nil:
		b.out = append(b.out, "null"...)
		b.did(4)
	case bool:
		if x {
			b.out = append(b.out, "true"...)
		} else {
			b.out = append(b.out, "false"...)
		}
		b.did(5)
	case json.Number:
		if x == "" {
			x = "0"
		}
		b.write(string(x))
	case string:
		appendMarshalString(b, x)
	case []any:
		b.out = append(b.out, '[')
		for i, e := range x {
			if i > 0 {
				b.out = append(b.out, ',')
			}
			b.did(1)
			appendMarshal(b, e)
		}
		b.out = append(b.out, ']')
		b.did(1)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
			b.did(16)
		}
		slices.SortFunc(keys, func(p, q string) int {
			b.did(16) // a comparison
			return strings.Compare(p, q)
		})
		b.out = append(b.out, '{')
		for i, k := range keys {
			if i > 0 {
				b.out = append(b.out, ',')
			}
			appendMarshalString(b, k)
			b.out = append(b.out, ':')
			b.did(2)
			appendMarshal(b, x[k])
		}
		b.out = append(b.out, '}')
		b.did(1)
	default: // not a decoded value: json.Marshal's own answer, uncounted
		mb, _ := json.Marshal(v)
		b.write(string(mb))
	}
}

// textTemplate is a text body template split at its placeholders
// (placeholderRe's matches, as ReplaceAllStringFunc finds them).
type textTemplate struct {
	parts  []string // literal text; len(parts) == len(params)+1
	params []string
}

func parseTextTemplate(t string) textTemplate {
	var tt textTemplate
	last := 0
	for _, m := range placeholderRe.FindAllStringIndex(t, -1) {
		tt.parts = append(tt.parts, t[last:m[0]])
		tt.params = append(tt.params, t[m[0]+1:m[1]-1])
		last = m[1]
	}
	tt.parts = append(tt.parts, t[last:])
	return tt
}

// fill fills the template from the input object, without encoding, by
// Kindgi's rules: a missing key stays as the literal {key}, null becomes
// "", a string, number or boolean its text, anything else its JSON
// (json.Marshal's). Metered by m.
func (tt textTemplate) fill(input map[string]any, m Meter) ([]byte, error) {
	b := &builder{m: m}
	return b.build(func() error {
		for i, p := range tt.params {
			b.write(tt.parts[i])
			v, ok := input[p]
			switch x := v.(type) {
			case nil:
				if !ok {
					b.write("{" + p + "}")
				}
			case string:
				b.write(x)
			case json.Number:
				b.write(x.String())
			case bool:
				b.write(strconv.FormatBool(x))
			default:
				appendMarshal(b, v)
			}
		}
		b.write(tt.parts[len(tt.parts)-1])
		return nil
	})
}
