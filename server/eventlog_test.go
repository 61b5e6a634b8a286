package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCallRecordBytesAsSlog: writeCall writes the bytes slog's
// JSONHandler writes for the same record, and declines (writing nothing)
// every record it cannot write so, which then goes through slog.
func TestCallRecordBytesAsSlog(t *testing.T) {
	when := time.Date(2026, 12, 2, 4, 33, 17, 984734611, time.UTC)
	base := []slog.Attr{slog.String("id", "bench.serve"), slog.String("target", "tool"), slog.String("outcome", "ok"),
		slog.Int64("durationMs", 3), slog.String("tenantId", "t1"), slog.String("runId", "r-<&>1"), slog.String("callId", "c_01")}
	cases := []struct {
		name  string
		attrs []slog.Attr
		fast  bool
	}{
		{"plain", base, true},
		{"negative int and empty string", append(append([]slog.Attr(nil), base...), slog.Int64("n", -12), slog.String("requestId", "")), true},
		{"quote", []slog.Attr{slog.String("id", `a"b`)}, false},
		{"backslash", []slog.Attr{slog.String("id", `a\b`)}, false},
		{"newline", []slog.Attr{slog.String("runId", "a\nb")}, false},
		{"non-ASCII", []slog.Attr{slog.String("tenantId", "tenañt")}, false},
		{"invalid UTF-8", []slog.Attr{slog.String("tenantId", "\xff")}, false},
		{"DEL", []slog.Attr{slog.String("tenantId", "a\x7f")}, false},
		{"U+2028", []slog.Attr{slog.String("tenantId", "a\u2028")}, false},
		{"not a string", []slog.Attr{slog.Float64("x", 1.5)}, false},
		{"key to escape", []slog.Attr{slog.String(`k"`, "v")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var fast, slow bytes.Buffer
			h := NewLogger(&fast).Handler().(*eventHandler)
			if got := h.writeCall(when, c.attrs); got != c.fast {
				t.Fatalf("writeCall = %v, want %v", got, c.fast)
			}
			if !c.fast {
				if fast.Len() != 0 {
					t.Fatalf("declined but wrote %q", fast.Bytes())
				}
				return
			}
			r := slog.NewRecord(when, slog.LevelInfo, "call", 0)
			r.AddAttrs(c.attrs...)
			if err := NewLogger(&slow).Handler().Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if fast.String() != slow.String() {
				t.Fatalf("writeCall:\n%s\nslog:\n%s", fast.Bytes(), slow.Bytes())
			}
		})
	}
}

// TestEventLinesDoNotInterleave: call records written directly and other
// events written by slog, from many goroutines into one unsynchronised
// writer, come out as whole lines.
func TestEventLinesDoNotInterleave(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf)
	h := log.Handler().(*eventHandler)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if !h.writeCall(time.Now(), []slog.Attr{slog.String("id", strings.Repeat("x", 300))}) {
					t.Error("declined a plain record")
					return
				}
				log.Info("listening", "port", i)
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 8*200*2 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200*2)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, `{"time":"`) || !strings.HasSuffix(l, "}") || strings.Count(l, `"time"`) != 1 {
			t.Fatalf("interleaved line %q", l)
		}
	}
}

// BenchmarkCallRecord is one call record as record writes it: direct
// (writeCall) and through slog's JSONHandler, into io.Discard.
//
//	go test -run '^$' -bench CallRecord -benchmem ./server
func BenchmarkCallRecord(b *testing.B) {
	attrs := []slog.Attr{slog.String("id", "bench.serve"), slog.String("target", "tool"), slog.String("outcome", "ok"),
		slog.Int64("durationMs", 3), slog.String("tenantId", "t1"), slog.String("runId", "r1"), slog.String("callId", "c_0123456789abcdef")}
	log := NewLogger(io.Discard)
	h := log.Handler().(*eventHandler)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.writeCall(time.Now(), attrs)
		}
	})
	b.Run("slog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			log.LogAttrs(context.Background(), slog.LevelInfo, "call", attrs...)
		}
	})
}

// TestAppendRFC3339NanoAsAppendFormat: the cached second's text and the
// trimmed nanoseconds give AppendFormat's RFC3339Nano bytes in UTC, fixed
// zones east and west, a zone with a DST change (the seconds around it),
// at second boundaries, for nanoseconds with and without trailing zeros,
// in any order of seconds and locations (the cache follows both).
func TestAppendRFC3339NanoAsAppendFormat(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		ny = time.FixedZone("NY", -5*3600) // no zoneinfo on this machine
	}
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("", 5*3600+30*60), time.FixedZone("W", -9*3600), ny}
	bases := []time.Time{
		time.Date(2026, 12, 2, 4, 33, 17, 0, time.UTC),
		time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC), // New York's spring change at 07:00 UTC
		time.Date(2026, 11, 1, 5, 59, 59, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	nanos := []int{0, 1, 10, 100000000, 999999999, 984734611, 500000000, 120, 7000}
	rng := rand.New(rand.NewPCG(5, 6))
	var got []byte
	for range 20000 {
		base := bases[rng.IntN(len(bases))]
		w := base.Add(time.Duration(rng.IntN(4))*time.Second + time.Duration(nanos[rng.IntN(len(nanos))])).In(locs[rng.IntN(len(locs))])
		if rng.IntN(2) == 0 {
			w = time.Now().In(locs[rng.IntN(len(locs))]) // with a monotonic reading
		}
		got = appendRFC3339Nano(got[:0], w)
		if want := w.Round(0).AppendFormat(nil, time.RFC3339Nano); string(got) != string(want) {
			t.Fatalf("%v: %s, AppendFormat %s", w, got, want)
		}
	}
}
