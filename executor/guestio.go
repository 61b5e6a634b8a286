package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/abi"
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

// appendContextJSON writes what contextJSON's json.Marshal writes when no
// string needs escaping and there are no settings; ok is false otherwise
// (json.Marshal then does it).
func appendContextJSON(b []byte, cc *CallContext, settings json.RawMessage, env map[string]string) (_ []byte, ok bool) {
	if len(settings) > 0 || len(env) > 8 {
		return nil, false
	}
	for _, v := range [...]string{cc.TenantID, cc.RunID, cc.RequestID, cc.ProjectID, cc.OrgID, cc.IdempotencyKey} {
		if !plainJSONString(v) {
			return nil, false
		}
	}
	var keys [8]string
	names := keys[:0]
	for k, v := range env {
		if !plainJSONString(k) || !plainJSONString(v) {
			return nil, false
		}
		names = append(names, k)
	}
	slices.Sort(names)
	if b == nil { // one allocation of the exact size
		n := len(`{"tenantId":"","runId":"","env":{}}`) + len(cc.TenantID) + len(cc.RunID)
		for _, f := range [...]struct{ name, v string }{{"requestId", cc.RequestID}, {"projectId", cc.ProjectID}, {"orgId", cc.OrgID}, {"idempotencyKey", cc.IdempotencyKey}} {
			if f.v != "" {
				n += len(`,"":""`) + len(f.name) + len(f.v)
			}
		}
		for _, k := range names {
			n += len(`,"":""`) + len(k) + len(env[k])
		}
		if len(names) > 0 {
			n-- // the first entry has no comma
		}
		if env == nil {
			n += len("null") - len("{}")
		}
		b = make([]byte, 0, n)
	}
	b = append(b, '{')
	b = appendField(b, "tenantId", cc.TenantID, true)
	b = appendField(b, "runId", cc.RunID, true)
	b = appendField(b, "requestId", cc.RequestID, false)
	b = appendField(b, "projectId", cc.ProjectID, false)
	b = appendField(b, "orgId", cc.OrgID, false)
	b = appendField(b, "idempotencyKey", cc.IdempotencyKey, false)
	if env == nil {
		return append(b, `,"env":null}`...), true
	}
	b = append(b, `,"env":{`...)
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, env[k]...)
		b = append(b, '"')
	}
	return append(b, "}}"...), true
}

// appendField appends "name":"v" to the object b has open (a comma first
// unless it is the first member); an empty v is left out unless always.
func appendField(b []byte, name, v string, always bool) []byte {
	if v == "" && !always {
		return b
	}
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// plainJSONString reports whether json.Marshal writes s as is between
// quotes: printable ASCII without '"', '\\' or HTML's <, > and &.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
