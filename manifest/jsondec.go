package manifest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Limits of the JSON decoder. They bound the work a hostile document can
// cause: JSON nesting (encoding/json's own limit), and the size of a number
// literal, because JSON Schema numbers are compared as exact rationals
// (math/big) and "1e999999999" would otherwise cost minutes of CPU.
const (
	maxDepth       = 10000 // values (inputs, outputs)
	maxSchemaDepth = 256   // manifests and schemas: compile time grows fast with depth
	maxNumberLen   = 1000
	maxNumberExp10 = 10000
)

// decodeOpts selects what the decoder does beyond building the value.
type decodeOpts struct {
	// maxDepth is the deepest nesting allowed (0: maxDepth).
	maxDepth int
	// rejectDuplicates makes a repeated object key an error. Without it the
	// last value wins (JSON.parse's rule) and decoded.dup is set.
	rejectDuplicates bool
	// spanDepth > 0 records the byte range of every object member value
	// nested at most spanDepth objects deep, keyed by JSON Pointer.
	spanDepth int
	// borrow makes unescaped strings share data's bytes instead of copying
	// them: only for a decoded tree that is dropped before data can change
	// (Schema.Validate).
	borrow bool
	// budget > 0 bounds the estimated bytes validating the document needs
	// (see ValueCost): past it decoding stops with an error that matches
	// ErrValidationBudget.
	budget int64
	// discard checks the document without building a tree (v is nil).
	discard bool
	// check, when non-nil, is called after about every tickBytes bytes of
	// the document (never for a smaller one): an error from it stops the
	// decoding, which returns that error as is (Work.Check's contract).
	check func() error
}

// tickBytes is how many bytes of a document the decoder reads between two
// calls of decodeOpts.check: about a fraction of a millisecond of work
// (a var so that tests can make every read a tick).
var tickBytes = 64 << 10

// Estimated memory of validating a document, per decoded value, charged
// against a validation budget before the validator runs. Measured with
// TestF18BudgetEstimateCoversMeasured (Go heap peak, garbage included, of
// the shapes that cost the most per byte): the decoded tree and, because
// every value may fail, the validator's error for each value.
const (
	// ValueCost is charged per JSON value: its slot in the tree (~48 B)
	// plus the validator's error for it should it fail (~450 B).
	ValueCost = 512
	// memberCost is charged per object member on top of its value (the
	// map entry and the key in a failing member's location), objectCost
	// per object (the map itself).
	memberCost = 320
	objectCost = 64
)

// decoded is a JSON document decoded into Go values: map[string]any, []any,
// string, json.Number, bool and nil (what jsonschema validates).
type decoded struct {
	v any
	// dup: an object key repeated (last value kept).
	dup bool
	// lossy: an invalid UTF-8 sequence or lone surrogate escape was replaced
	// by U+FFFD, so the value differs from what the bytes literally say.
	lossy bool
	// spans of object member values (decodeOpts.spanDepth).
	spans map[string]span
	// cost is the estimated validation bytes (with decodeOpts.budget).
	cost int64
	// heavyNum is the largest numberWeight of a number literal in the
	// document (meter.go).
	heavyNum int64
}

// needsReencode reports whether a consumer reading the original bytes could
// see something else than the decoded value.
func (d *decoded) needsReencode() bool { return d.dup || d.lossy }

type span struct{ start, end int }

// syntaxError describes a document that is not exactly one JSON value.
type syntaxError struct {
	msg    string
	offset int
	path   string // JSON pointer of the value being read, "" at the root
	dupKey bool   // a repeated object key (decodeOpts.rejectDuplicates)
	limit  bool   // valid JSON beyond a decoder limit (depth, number size)
	budget bool   // over the validation budget (decodeOpts.budget)
}

// Is makes an over-budget error match ErrValidationBudget.
func (e *syntaxError) Is(target error) bool { return e.budget && target == ErrValidationBudget }

// valid reports whether the document was valid JSON that the decoder
// refused anyway (a limit or a repeated key).
func (e *syntaxError) valid() bool { return e.dupKey || e.limit }

func (e *syntaxError) Error() string {
	if e.dupKey {
		return fmt.Sprintf("%s at %s (offset %d)", e.msg, e.path, e.offset)
	}
	if e.path != "" {
		return fmt.Sprintf("%s at offset %d (in %s)", e.msg, e.offset, e.path)
	}
	return fmt.Sprintf("%s at offset %d", e.msg, e.offset)
}

// frame is one level of the path being decoded, kept cheap (no strconv)
// until an error needs it.
type frame struct {
	key   string
	index int
	arr   bool
}

type decoder struct {
	data  []byte
	pos   int
	opts  decodeOpts
	out   decoded
	stack []frame
	cost  int64 // estimated validation bytes so far (decodeOpts.budget)
	// tickAt is the offset at which check is next called (MaxInt: never).
	tickAt int
}

// tick calls opts.check once the document has been read up to pos past
// tickAt, and panics with its error (stopped, recovered in decodeJSON).
func (d *decoder) tick(pos int) {
	if pos < d.tickAt {
		return
	}
	if err := d.opts.check(); err != nil {
		panic(stopped{err})
	}
	d.tickAt = pos + tickBytes
}

// charge adds n to the estimate and fails once it passes the budget.
func (d *decoder) charge(n int64) error {
	if d.opts.budget <= 0 {
		return nil
	}
	d.cost += n
	if d.cost > d.opts.budget {
		return &syntaxError{msg: fmt.Sprintf("validating it would need more than the %d-byte validation budget (about %d bytes per JSON value)", d.opts.budget, ValueCost),
			offset: d.pos, path: d.shortPath(), limit: true, budget: true}
	}
	return nil
}

// DecodeValue decodes doc, which must hold exactly one JSON value, into
// map[string]any, []any, string, json.Number, bool and nil (a repeated key:
// the last value; invalid UTF-8 and lone surrogate escapes: U+FFFD; the
// decoder's depth and number limits apply). check (nil: none) is called
// after about every 64 KiB of doc; an error from it stops the decoding,
// which returns that error as is.
func DecodeValue(doc []byte, check func() error) (any, error) {
	d, err := decodeJSON(doc, decodeOpts{check: check})
	if err != nil {
		return nil, err
	}
	return d.v, nil
}

// decodeJSON decodes data, which must hold exactly one JSON value (RFC 8259)
// with optional surrounding whitespace. Numbers stay json.Number.
//
// With opts.check the decoding can be stopped: it reads at most about
// tickBytes bytes between two calls of it (strings, whitespace and number
// digits are read in runs of at most that many), and returns its error.
func decodeJSON(data []byte, opts decodeOpts) (_ *decoded, err error) {
	if opts.maxDepth <= 0 {
		opts.maxDepth = maxDepth
	}
	d := &decoder{data: data, opts: opts, tickAt: math.MaxInt}
	if opts.check != nil {
		d.tickAt = tickBytes
		defer recoverStop(&err)
	}
	d.skipWS()
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.skipWS()
	if d.pos < len(d.data) {
		return nil, d.errorf("invalid character %s after top-level value", quoteChar(d.data[d.pos]))
	}
	d.out.v = v
	d.out.cost = d.cost
	return &d.out, nil
}

func (d *decoder) path() string {
	var sb strings.Builder
	for _, f := range d.stack {
		sb.WriteByte('/')
		if f.arr {
			sb.WriteString(strconv.Itoa(f.index))
		} else {
			sb.WriteString(escapePointerToken(f.key))
		}
	}
	return sb.String()
}

// shortPath is path() cut to a readable length for messages.
func (d *decoder) shortPath() string {
	const max = 200
	p := d.path()
	if len(p) > max {
		cut := len(p) - max
		for cut < len(p) && p[cut] != '/' {
			cut++
		}
		p = "..." + p[cut:]
	}
	return p
}

func (d *decoder) errorf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...), offset: d.pos, path: d.shortPath()}
}

func (d *decoder) limitf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...), offset: d.pos, path: d.shortPath(), limit: true}
}

func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	if c >= utf8.RuneSelf {
		s = fmt.Sprintf(`"\x%02x"`, c)
	}
	return "'" + s[1:len(s)-1] + "'"
}

func (d *decoder) skipWS() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
			if d.pos >= d.tickAt {
				d.tick(d.pos)
			}
		default:
			return
		}
	}
}

func (d *decoder) value() (any, error) {
	if d.pos >= d.tickAt {
		d.tick(d.pos)
	}
	if err := d.charge(ValueCost); err != nil {
		return nil, err
	}
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of JSON input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.string()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	default:
		return nil, d.errorf("invalid character %s looking for beginning of value", quoteChar(c))
	}
}

func (d *decoder) literal(lit string) error {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		for i := 0; i < len(lit); i++ {
			if d.pos+i >= len(d.data) {
				d.pos += i
				return d.errorf("unexpected end of JSON input")
			}
			if d.data[d.pos+i] != lit[i] {
				d.pos += i
				return d.errorf("invalid character %s in literal %s", quoteChar(d.data[d.pos]), lit)
			}
		}
	}
	d.pos += len(lit)
	return nil
}

func (d *decoder) push(f frame) error {
	if len(d.stack) >= d.opts.maxDepth {
		return d.limitf("exceeded max nesting depth of %d", d.opts.maxDepth)
	}
	d.stack = append(d.stack, f)
	return nil
}

func (d *decoder) object() (any, error) {
	d.pos++ // '{'
	if err := d.charge(objectCost); err != nil {
		return nil, err
	}
	var m map[string]any
	if !d.opts.discard {
		m = map[string]any{}
	}
	record := d.opts.spanDepth > 0 && len(d.stack) < d.opts.spanDepth
	if err := d.push(frame{}); err != nil {
		return nil, err
	}
	d.skipWS()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		d.stack = d.stack[:len(d.stack)-1]
		return m, nil
	}
	for {
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		if d.data[d.pos] != '"' {
			return nil, d.errorf("invalid character %s looking for beginning of object key string", quoteChar(d.data[d.pos]))
		}
		keyStart := d.pos
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		key := k.(string)
		if err := d.charge(memberCost); err != nil {
			return nil, err
		}
		d.stack[len(d.stack)-1].key = key
		if _, seen := m[key]; seen && !d.opts.discard {
			if d.opts.rejectDuplicates {
				d.pos = keyStart
				return nil, &syntaxError{msg: fmt.Sprintf("duplicate key %q", key), offset: keyStart, path: d.shortPath(), dupKey: true}
			}
			d.out.dup = true
		}
		d.skipWS()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		if d.data[d.pos] != ':' {
			return nil, d.errorf("invalid character %s after object key", quoteChar(d.data[d.pos]))
		}
		d.pos++
		d.skipWS()
		start := d.pos
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		if record {
			if d.out.spans == nil {
				d.out.spans = map[string]span{}
			}
			d.out.spans[d.path()] = span{start, d.pos}
		}
		if !d.opts.discard {
			m[key] = v
		}
		d.skipWS()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.skipWS()
		case '}':
			d.pos++
			d.stack = d.stack[:len(d.stack)-1]
			return m, nil
		default:
			return nil, d.errorf("invalid character %s after object key:value pair", quoteChar(d.data[d.pos]))
		}
	}
}

func (d *decoder) array() (any, error) {
	d.pos++ // '['
	var a []any
	if !d.opts.discard {
		a = []any{}
	}
	n := 0
	if err := d.push(frame{arr: true}); err != nil {
		return nil, err
	}
	d.skipWS()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		d.stack = d.stack[:len(d.stack)-1]
		return a, nil
	}
	for {
		d.stack[len(d.stack)-1].index = n
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		n++
		if !d.opts.discard {
			a = append(a, v)
		}
		d.skipWS()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.skipWS()
		case ']':
			d.pos++
			d.stack = d.stack[:len(d.stack)-1]
			return a, nil
		default:
			return nil, d.errorf("invalid character %s after array element", quoteChar(d.data[d.pos]))
		}
	}
}

func (d *decoder) number() (any, error) {
	start := d.pos
	data := d.data
	i := d.pos
	if data[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
			n++
			if i >= d.tickAt {
				d.tick(i)
			}
		}
		return n
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		digits()
	default:
		d.pos = i
		if i >= len(data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		return nil, d.errorf("invalid character %s in numeric literal", quoteChar(data[i]))
	}
	if i < len(data) && data[i] == '.' {
		i++
		if digits() == 0 {
			d.pos = i
			if i >= len(data) {
				return nil, d.errorf("unexpected end of JSON input")
			}
			return nil, d.errorf("invalid character %s after decimal point in numeric literal", quoteChar(data[i]))
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		expStart := i
		if digits() == 0 {
			d.pos = i
			if i >= len(data) {
				return nil, d.errorf("unexpected end of JSON input")
			}
			return nil, d.errorf("invalid character %s in exponent of numeric literal", quoteChar(data[i]))
		}
		exp := strings.TrimLeft(string(data[expStart:i]), "0")
		if len(exp) > 5 || (exp != "" && mustAtoi(exp) > maxNumberExp10) {
			d.pos = start
			return nil, d.limitf("number exponent out of supported range (|exponent| <= %d)", maxNumberExp10)
		}
	}
	if i-start > maxNumberLen {
		d.pos = start
		return nil, d.limitf("number literal longer than %d characters", maxNumberLen)
	}
	d.pos = i
	if d.opts.discard {
		return nil, nil // boxing a json.Number allocates
	}
	n := json.Number(data[start:i])
	if w := numberWeight(n); w > d.out.heavyNum {
		d.out.heavyNum = w
	}
	return n, nil
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func (d *decoder) string() (any, error) {
	d.pos++ // opening quote
	start := d.pos
	data := d.data
	// Fast path: plain ASCII without escapes.
	if i := d.plainRun(start); i < len(data) && data[i] == '"' {
		d.pos = i + 1
		if d.opts.discard {
			return "", nil // a constant: no allocation
		}
		if d.opts.borrow && i > start {
			return unsafe.String(&data[start], i-start), nil
		}
		if err := d.charge(int64(i - start)); err != nil {
			return nil, err
		}
		return string(data[start:i]), nil
	}
	var sb strings.Builder
	keep := !d.opts.discard
	i := start
	for {
		if i >= len(data) {
			d.pos = i
			return nil, d.errorf("unexpected end of JSON input")
		}
		if i >= d.tickAt {
			d.tick(i)
		}
		c := data[i]
		switch {
		case c == '"':
			d.pos = i + 1
			if !keep {
				return "", nil
			}
			if err := d.charge(int64(sb.Len())); err != nil {
				return nil, err
			}
			return sb.String(), nil
		case c < 0x20:
			d.pos = i
			return nil, d.errorf("invalid character %s in string literal", quoteChar(c))
		case c == '\\':
			i++
			if i >= len(data) {
				d.pos = i
				return nil, d.errorf("unexpected end of JSON input")
			}
			switch data[i] {
			case '"', '\\', '/':
				if keep {
					sb.WriteByte(data[i])
				}
				i++
			case 'b':
				if keep {
					sb.WriteByte('\b')
				}
				i++
			case 'f':
				if keep {
					sb.WriteByte('\f')
				}
				i++
			case 'n':
				if keep {
					sb.WriteByte('\n')
				}
				i++
			case 'r':
				if keep {
					sb.WriteByte('\r')
				}
				i++
			case 't':
				if keep {
					sb.WriteByte('\t')
				}
				i++
			case 'u':
				r, ok := hex4(data, i+1)
				if !ok {
					d.pos = i
					return nil, d.errorf("invalid escape sequence in string literal")
				}
				i += 5
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+1 < len(data) && data[i] == '\\' && data[i+1] == 'u' {
						if v, ok := hex4(data, i+2); ok {
							r2 = v
						}
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
						d.out.lossy = true
					}
				}
				if keep {
					sb.WriteRune(r)
				}
			default:
				d.pos = i
				return nil, d.errorf("invalid character %s in string escape code", quoteChar(data[i]))
			}
		case c < utf8.RuneSelf:
			if keep {
				sb.WriteByte(c)
			}
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				d.out.lossy = true
			}
			if keep {
				sb.WriteRune(r)
			}
			i += size
		}
	}
}

// plainRun is start plus the length of plainRun(d.data[start:]), read in
// runs of at most tickBytes between ticks.
func (d *decoder) plainRun(start int) int {
	if d.tickAt == math.MaxInt {
		return start + plainRun(d.data[start:])
	}
	i := start
	for {
		if i >= d.tickAt {
			d.tick(i)
		}
		end := min(len(d.data), d.tickAt)
		n := plainRun(d.data[i:end])
		i += n
		if i < end || end == len(d.data) {
			return i
		}
	}
}

func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// escapePointerToken escapes one JSON Pointer reference token (RFC 6901).
func escapePointerToken(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	tok = strings.ReplaceAll(tok, "~", "~0")
	return strings.ReplaceAll(tok, "/", "~1")
}

// pointer joins tokens into a JSON Pointer ("" for none).
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(escapePointerToken(t))
	}
	return sb.String()
}

// SWAR constants: one in every byte, and every byte's high bit.
const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// plainRun returns the length of b's prefix free of '"', '\\', control
// characters and non-ASCII bytes, testing eight bytes per step.
func plainRun(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (swarOnes * '"')
		e := x ^ (swarOnes * '\\')
		// a zero byte in q or e, a byte < 0x20 in x, or a high bit in x
		m := ((q - swarOnes) &^ q) | ((e - swarOnes) &^ e) | ((x - swarOnes*0x20) &^ x) | x
		if m&swarHigh != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}
