package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/rawbuf"
	"github.com/sandboxd/sandboxd/limits"
)

// lineForwarder passes a guest stream to a sink line by line (prefixed with
// the tool id and stream) and keeps the stream's tail for error messages. It
// forwards at most maxForwardBytes per call; the rest is counted, not written.
// Partial lines are held until a newline or Flush; a line longer than
// maxLogLine is forwarded in pieces of maxLogLine bytes.
//
// What it holds is bounded by constants whatever the guest writes, and none
// of it is a second copy of a write: pending holds at most maxLogLine bytes
// (a partial line), tail at most 2*stderrTail (the last bytes written).
// Bytes past the forwarding cap are not copied at all.
type lineForwarder struct {
	mu        sync.Mutex
	sink      io.Writer
	toolID    string
	stream    string
	prefix    string // built on first use: most calls write nothing
	pending   []byte // a partial line, <= maxLogLine bytes
	tail      []byte // the last bytes written, <= 2*stderrTail
	forwarded int
	dropped   int
}

// sinkMu serialises whole lines from concurrent guests onto shared sinks.
var sinkMu sync.Mutex

func newLineForwarder(sink io.Writer, toolID, stream string) *lineForwarder {
	return &lineForwarder{sink: sink, toolID: toolID, stream: stream}
}

// reset makes f the forwarder of a new call to sink: nothing of what an
// earlier call wrote remains (its pending partial line and its tail are
// cleared, the forwarding cap counts from 0); only the buffers' capacity
// is kept, so a recycled instance's calls allocate no forwarders
// (instance.callStreams).
func (f *lineForwarder) reset(sink io.Writer, toolID, stream string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.toolID != toolID || f.stream != stream {
		f.prefix = ""
	}
	f.sink, f.toolID, f.stream = sink, toolID, stream
	clear(f.pending)
	clear(f.tail)
	f.pending, f.tail = f.pending[:0], f.tail[:0]
	f.forwarded, f.dropped = 0, 0
}

// linePrefix returns "[tool stream] ". f.mu is held.
func (f *lineForwarder) linePrefix() string {
	if f.prefix == "" {
		f.prefix = "[" + f.toolID + " " + f.stream + "] "
	}
	return f.prefix
}

// Write implements io.Writer. It never fails, so a guest cannot tell whether
// anyone reads its output.
func (f *lineForwarder) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keepTail(p)
	n := len(p)
	for len(p) > 0 {
		if f.sink == nil || f.forwarded >= maxForwardBytes {
			// Nothing more can be forwarded: count the bytes, copy none.
			f.dropped += len(p)
			f.pending = f.pending[:0]
			break
		}
		i := bytes.IndexByte(p, '\n')
		line := p
		if i >= 0 {
			line = p[:i]
		}
		room := maxLogLine - len(f.pending)
		if len(line) >= room {
			// The line reaches maxLogLine: forward a full piece.
			f.pending = append(f.pending, line[:room]...)
			f.emit(f.pending)
			f.pending = f.pending[:0]
			p = p[room:]
			continue
		}
		f.pending = append(f.pending, line...)
		if i < 0 {
			break
		}
		f.emit(f.pending)
		f.pending = f.pending[:0]
		p = p[i+1:]
	}
	return n, nil
}

// keepTail appends the end of p to the tail, keeping at most 2*stderrTail
// bytes (Tail returns the last stderrTail). f.mu is held.
func (f *lineForwarder) keepTail(p []byte) {
	if len(p) >= stderrTail {
		f.tail = append(f.tail[:0], p[len(p)-stderrTail:]...)
		return
	}
	if len(f.tail)+len(p) > 2*stderrTail {
		keep := stderrTail - len(p)
		f.tail = append(f.tail[:0], f.tail[len(f.tail)-keep:]...)
	}
	f.tail = append(f.tail, p...)
}

func (f *lineForwarder) emit(line []byte) {
	if f.sink == nil {
		return
	}
	if f.forwarded+len(line) > maxForwardBytes {
		f.dropped += len(line)
		return
	}
	f.forwarded += len(line)
	sinkMu.Lock()
	_, _ = io.WriteString(f.sink, f.linePrefix()+sanitizeLine(line)+"\n")
	sinkMu.Unlock()
}

// Flush forwards a pending partial line and reports dropped bytes.
func (f *lineForwarder) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) > 0 {
		f.emit(f.pending)
		f.pending = f.pending[:0]
	}
	if f.dropped > 0 && f.sink != nil {
		sinkMu.Lock()
		_, _ = fmt.Fprintf(f.sink, "%s(%d bytes dropped over the %d-byte forwarding cap)\n", f.linePrefix(), f.dropped, maxForwardBytes)
		sinkMu.Unlock()
		f.dropped = 0
	}
}

// Tail returns the last few KiB written.
func (f *lineForwarder) Tail() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tail
	if len(t) > stderrTail {
		t = t[len(t)-stderrTail:]
	}
	return sanitizeLine(t)
}

// logBudget caps the guest log lines of an instance's initialisation
// (instantiation, start, _initialize), where no invocation is attached, with
// the caps of a call: maxLogLines lines and maxLogBytes bytes (F07).
type logBudget struct {
	mu           sync.Mutex
	lines, bytes int
	drops        int
}

type logBudgetKey struct{}

func withLogBudget(ctx context.Context, b *logBudget) context.Context {
	return context.WithValue(ctx, logBudgetKey{}, b)
}

// admitLog reports whether a guest log line of n bytes may be emitted, and
// counts it: against the call's caps when an invocation is attached, else
// against the initialisation's. A line logged outside both is dropped.
func admitLog(ctx context.Context, inv *invocation, n int) bool {
	if inv != nil {
		inv.mu.Lock()
		defer inv.mu.Unlock()
		if inv.logLines >= maxLogLines || inv.logBytes+n > maxLogBytes {
			inv.logDrops++
			return false
		}
		inv.logLines++
		inv.logBytes += n
		return true
	}
	b, _ := ctx.Value(logBudgetKey{}).(*logBudget)
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines >= maxLogLines || b.bytes+n > maxLogBytes {
		b.drops++
		return false
	}
	b.lines++
	b.bytes += n
	return true
}

// cappedBuffer holds a command's stdout, charging every byte to the memory
// account. Past the cap it refuses the write and calls onOverflow once.
type cappedBuffer struct {
	mu         sync.Mutex
	acct       *limits.Account
	buf        bytes.Buffer
	onOverflow func()
	over       bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return 0, abi.ErrMemoryBudget
	}
	if !c.acct.Reserve(int64(len(p))) {
		c.over = true
		if c.onOverflow != nil {
			c.onOverflow()
		}
		return 0, abi.ErrMemoryBudget
	}
	c.buf.Write(p)
	return len(p), nil
}

// emitLog delivers a guest log line to the configured sink.
func (e *Executor) emitLog(r LogRecord) {
	if e.cfg.logSink != nil {
		e.cfg.logSink(r)
		return
	}
	if e.cfg.guestStderr == nil {
		return
	}
	level := [...]string{"debug", "info", "warn", "error"}[r.Level]
	sinkMu.Lock()
	_, _ = fmt.Fprintf(e.cfg.guestStderr, "[%s log] %s: %s\n", r.ToolID, level, r.Msg)
	sinkMu.Unlock()
}

// switchWriter forwards to the writer of the call an instance currently
// serves; between calls (nil target) writes go to the instance's own
// forwarder given at creation.
type switchWriter struct {
	mu     sync.Mutex
	def    *lineForwarder
	target *lineForwarder
}

func newSwitchWriter(def *lineForwarder) *switchWriter { return &switchWriter{def: def} }

// Switch routes later writes to w (nil: back to the default).
func (s *switchWriter) Switch(w *lineForwarder) {
	s.mu.Lock()
	s.target = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	var w io.Writer = s.def
	if s.target != nil {
		w = s.target
	}
	s.mu.Unlock()
	return w.Write(p)
}

// errMemMB is readCharged's refusal: the body does not fit in the account.
var errMemMB = errors.New("the response body does not fit in memMB")

// readChunk is how much readCharged asks of the body at a time.
const readChunk = 32 << 10

// readCharged reads r into a buffer whose capacity is reserved in acct
// before it is allocated (when the buffer grows, old and new are both
// charged while both live), up to capAt bytes when capAt >= 0. It returns
// errMemMB when acct refuses, or r's error.
func readCharged(r io.Reader, acct *limits.Account, capAt int64) ([]byte, error) {
	var data []byte
	chunk := make([]byte, readChunk)
	if !acct.Reserve(readChunk) {
		return nil, errMemMB
	}
	defer acct.Release(readChunk)
	for capAt < 0 || int64(len(data)) < capAt {
		want := chunk
		if capAt >= 0 {
			want = chunk[:min(int64(len(chunk)), capAt-int64(len(data)))]
		}
		n, err := r.Read(want)
		if n > 0 {
			if len(data)+n > cap(data) {
				newCap := max(2*cap(data), len(data)+n, 4<<10)
				if capAt >= 0 {
					newCap = min(newCap, int(capAt))
				}
				if !acct.Reserve(int64(newCap)) {
					acct.Release(int64(cap(data)))
					return nil, errMemMB
				}
				grown := make([]byte, len(data), newCap)
				copy(grown, data)
				acct.Release(int64(cap(data)))
				data = grown
			}
			data = append(data, want[:n]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			acct.Release(int64(cap(data)))
			return nil, err
		}
	}
	return data, nil
}

// jsonStringLen is the length of appendJSONString(nil, b, tick). tick (nil:
// none) is called after every hostChunk bytes of b, as appendJSONString
// and validJSON call theirs.
func jsonStringLen(b []byte, tick func()) int {
	n := 2
	next := hostChunk
	for i := 0; i < len(b); {
		if tick != nil && i >= next {
			tick()
			next = i + hostChunk
		}
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				if c == '\n' || c == '\r' || c == '\t' {
					n += 2
				} else {
					n += 6
				}
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// appendJSONString appends b as a JSON string: invalid UTF-8 becomes
// U+FFFD, and <, >, &, U+2028 and U+2029 are escaped as encoding/json does.
// tick (nil: none) is called after every hostChunk bytes of b: it may
// panic to stop the work (a call's chargeBytes).
func appendJSONString(dst, b []byte, tick func()) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	next := hostChunk
	for i := 0; i < len(b); {
		if tick != nil && i >= next {
			tick()
			next = i + hostChunk
		}
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028':
			dst = append(dst, `\u2028`...)
		case r == '\u2029':
			dst = append(dst, `\u2029`...)
		default:
			dst = append(dst, b[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// validJSON is json.Valid(b) — exactly one JSON value (RFC 8259, nesting at
// most encoding/json's 10000 deep, string bytes not checked as UTF-8) with
// only whitespace around it — calling tick (nil: none) after every
// hostChunk bytes, so that a call can stop it: json.Valid is one step of
// seconds for hundreds of MiB (2.8 s for 256 MiB at load 10).
func validJSON(b []byte, tick func()) bool {
	const maxDepth = 10000 // encoding/json's maxNestingDepth
	v := jsonScan{b: b, tick: tick, next: hostChunk}
	var stack []byte // the open containers, '{' or '['
	for {
		// A value is expected at v.i.
		v.at()
		v.space()
		if v.i >= len(b) {
			return false
		}
		switch c := b[v.i]; c {
		case '{', '[':
			if len(stack) == maxDepth {
				return false
			}
			v.i++
			v.space()
			if v.i < len(b) && b[v.i] == c+2 { // '}' or ']'
				v.i++
				break // an empty container: a value
			}
			stack = append(stack, c)
			if c == '{' && !v.member() {
				return false
			}
			continue
		case '"':
			if !v.str() {
				return false
			}
		case 't':
			if !v.literal("true") {
				return false
			}
		case 'f':
			if !v.literal("false") {
				return false
			}
		case 'n':
			if !v.literal("null") {
				return false
			}
		default:
			if !v.number() {
				return false
			}
		}
		// After a value: close containers, or a comma and the next one.
		for {
			v.at()
			v.space()
			if len(stack) == 0 {
				return v.i == len(b)
			}
			if v.i >= len(b) {
				return false
			}
			top, c := stack[len(stack)-1], b[v.i]
			if c == top+2 { // '}' or ']'
				v.i++
				stack = stack[:len(stack)-1]
				continue
			}
			if c != ',' {
				return false
			}
			v.i++
			if top == '{' && !v.member() {
				return false
			}
			break
		}
	}
}

// jsonScan is validJSON's position in b.
type jsonScan struct {
	b    []byte
	i    int
	tick func()
	next int
}

// at calls tick once another hostChunk bytes have been passed.
func (v *jsonScan) at() {
	if v.tick != nil && v.i >= v.next {
		v.tick()
		v.next = v.i + hostChunk
	}
}

func (v *jsonScan) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
			v.at()
		default:
			return
		}
	}
}

// member reads an object member's key and colon (the value follows).
func (v *jsonScan) member() bool {
	v.space()
	if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
		return false
	}
	v.space()
	if v.i >= len(v.b) || v.b[v.i] != ':' {
		return false
	}
	v.i++
	return true
}

// str reads a string from its opening quote.
func (v *jsonScan) str() bool {
	b := v.b
	v.i++
	for v.i < len(b) {
		v.at()
		switch c := b[v.i]; {
		case c == '"':
			v.i++
			return true
		case c == '\\':
			if v.i+1 >= len(b) {
				return false
			}
			switch b[v.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i += 2
			case 'u':
				if v.i+6 > len(b) {
					return false
				}
				for _, h := range b[v.i+2 : v.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				v.i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			v.i++
		}
	}
	return false
}

func (v *jsonScan) literal(word string) bool {
	if !bytes.HasPrefix(v.b[v.i:], []byte(word)) {
		return false
	}
	v.i += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (v *jsonScan) number() bool {
	b := v.b
	if v.i < len(b) && b[v.i] == '-' {
		v.i++
	}
	switch {
	case v.i < len(b) && b[v.i] == '0':
		v.i++
	case v.i < len(b) && '1' <= b[v.i] && b[v.i] <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(b) && b[v.i] == '.' {
		v.i++
		if v.digits() == 0 {
			return false
		}
	}
	if v.i < len(b) && (b[v.i] == 'e' || b[v.i] == 'E') {
		v.i++
		if v.i < len(b) && (b[v.i] == '+' || b[v.i] == '-') {
			v.i++
		}
		if v.digits() == 0 {
			return false
		}
	}
	return true
}

func (v *jsonScan) digits() int {
	start := v.i
	for v.i < len(v.b) && '0' <= v.b[v.i] && v.b[v.i] <= '9' {
		v.i++
		v.at()
	}
	return v.i - start
}

// unquoteJSONString is what json.Unmarshal of b into a string gives when b
// is one JSON string with only whitespace around it (invalid UTF-8 and lone
// surrogate escapes become U+FFFD); ok is false for anything else. tick
// (nil: none) is called after every hostChunk bytes of b, as validJSON
// calls its own: it may panic to stop the work.
func unquoteJSONString(b []byte, tick func()) (out []byte, ok bool) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	i++
	out = rawbuf.Uncleared(len(b) - i)
	next := i + hostChunk
	for {
		if tick != nil && i >= next {
			tick()
			next = i + hostChunk
		}
		// A run of plain bytes, up to the next tick.
		j, end := i, min(len(b), next)
		for j < end {
			if c := b[j]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
				break
			}
			j++
		}
		out = append(out, b[i:j]...)
		i = j
		if i >= len(b) {
			return nil, false
		}
		if i == end {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b); i++ {
				if c := b[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
					return nil, false
				}
			}
			if out == nil {
				out = []byte{}
			}
			return out, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if i+1 >= len(b) {
				return nil, false
			}
			switch e := b[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(b, i+2)
				if !ok {
					return nil, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if v, ok := hex4(b, i+2); ok {
							r2 = v
						}
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				return nil, false
			}
			i += 2
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, b[i:i+size]...)
			}
			i += size
		}
	}
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
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

// sanitizeLine makes guest text safe to print: valid UTF-8, no control
// characters other than tab and newline.
func sanitizeLine(b []byte) string {
	s := string(b)
	if utf8.ValidString(s) && !hasControl(s) {
		return s
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			out = append(out, '\uFFFD')
		case r < 0x20 && r != '\t' && r != '\n', r == 0x7f:
			out = append(out, '\uFFFD')
		default:
			out = append(out, r)
		}
	}
	return string(out)
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f {
			return true
		}
	}
	return false
}
