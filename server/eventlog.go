package server

import (
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// eventHandler is NewLogger's handler: slog's JSONHandler (every event
// goes through it), plus writeCall, a direct encoder of the "call" record
// — one per invocation, the only event on the hot path — that writes the
// bytes the JSONHandler would. Both write whole lines through one locked
// writer, so lines never interleave.
type eventHandler struct {
	*slog.JSONHandler
	w *lockedWriter
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeCall writes the record {"time","level":"INFO","kind":"call",attrs…}
// as the JSONHandler would, for attributes that are strings needing no
// escape and int64s (every call record, unless a caller sent an id with
// quotes, backslashes, control or non-ASCII bytes). It reports false,
// having written nothing, for any other record: the caller logs it
// through slog.
func (h *eventHandler) writeCall(t time.Time, attrs []slog.Attr) bool {
	for _, a := range attrs {
		switch a.Value.Kind() {
		case slog.KindString:
			if !plainJSON(a.Value.String()) {
				return false
			}
		case slog.KindInt64:
		default:
			return false
		}
		if !plainJSON(a.Key) {
			return false
		}
	}
	if y := t.Year(); y < 0 || y >= 10000 {
		return false
	}
	bp := lineBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = t.Round(0).AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","kind":"call"`...)
	for _, a := range attrs {
		b = append(b, ',', '"')
		b = append(b, a.Key...)
		b = append(b, '"', ':')
		if a.Value.Kind() == slog.KindInt64 {
			b = strconv.AppendInt(b, a.Value.Int64(), 10)
			continue
		}
		b = append(b, '"')
		b = append(b, a.Value.String()...)
		b = append(b, '"')
	}
	b = append(b, '}', '\n')
	_, _ = h.w.Write(b)
	if cap(b) <= 4<<10 {
		*bp = b
		lineBufs.Put(bp)
	}
	return true
}

// plainJSON reports whether s is written into a JSON string as it is:
// printable ASCII without '"' or '\' (slog escapes nothing else in that
// range: it does not HTML-escape <, > and &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
