package server

import (
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
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
	b = appendRFC3339Nano(b, t)
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

// secondText is the RFC 3339 text of one second in one location: the
// date and time up to the seconds, and the zone.
type secondText struct {
	unix       int64
	loc        *time.Location
	head, zone string
}

// lastSecond is the second the last call record was written in: call
// records of the same second share its text (time.Time.AppendFormat was
// 0.8% of the served path's CPU under wrk, bench-serve -cpuprofile c=8).
var lastSecond atomic.Pointer[secondText]

// appendRFC3339Nano appends t as t.Round(0).AppendFormat(b,
// time.RFC3339Nano) would: for a year in [0, 9999] (writeCall's), the
// second's text, cached, and the nanoseconds without trailing zeros (none
// at all, and no '.', at zero).
func appendRFC3339Nano(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		return t.Round(0).AppendFormat(b, time.RFC3339Nano)
	}
	st := lastSecond.Load()
	if st == nil || st.unix != t.Unix() || st.loc != t.Location() {
		// The zone's offset is fixed within a second of one location.
		txt := t.Round(0).Truncate(time.Second).Format(time.RFC3339)
		n := len("2006-01-02T15:04:05")
		st = &secondText{unix: t.Unix(), loc: t.Location(), head: txt[:n], zone: txt[n:]}
		lastSecond.Store(st)
	}
	b = append(b, st.head...)
	if ns := t.Nanosecond(); ns != 0 {
		var d [10]byte
		d[0] = '.'
		for i := 9; i >= 1; i-- {
			d[i] = byte('0' + ns%10)
			ns /= 10
		}
		end := 10
		for d[end-1] == '0' {
			end--
		}
		b = append(b, d[:end]...)
	}
	return append(b, st.zone...)
}
