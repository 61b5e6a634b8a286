//go:build unix

package executor_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/limits"
)

// BenchmarkRecord measures what recording costs a call (docs/replay.md
// "Cost"; the bound is 10 %) for a 1 KiB echo (WAT reactor,
// context-isolated, pooled) and a Go guest's call with one loopback HTTP
// exchange. Its variants run interleaved, in rounds of b.N calls each
// (the order shuffled every round, a collection between batches), so a
// load change on the shared machine falls on all of them alike:
//
//   - off: a plain executor, no recorder (the baseline);
//   - recordable-off: a recordable executor (Config.WithRecordable, what
//     serve --record-failures makes), no recorder;
//   - record: the recordable executor, recorded, not written (a
//     successful call under --record-failures);
//   - record-write: the same, written to io.Discard (the encoding alone);
//   - record-file: the same, written to a new file (created, written,
//     closed, as serve keeps a failed call's; removed between batches,
//     untimed);
//   - fresh-file: the plain executor, recorded on an instance made for the
//     call (run --record, an executor without WithRecordable) and written
//     to a file.
//
// Per variant it reports the median over the rounds of a call's CPU time
// on the calling thread (<v>-thread-us: the call runs there, recording and
// writing included; a load-independent measure), of the process's CPU
// time (<v>-proc-us: everything, the HTTP transport's and the loopback
// server's goroutines, pool refills and GC included), of wall time
// (<v>-wall-us) and its allocations (<v>-allocs), and each median over
// off's (<v>/off-thread, <v>/off-proc, <v>/off-wall). ns/op, B/op and
// allocs/op are off's. A ratio is the median over the rounds of the
// variant's batch over the same round's off batch. Use -benchtime 3s or more for the HTTP case (its
// calls take milliseconds). <case>-replay is a replay of the call.
func BenchmarkRecord(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items":[1,2,3]}`)
	}))
	defer srv.Close()
	port := serverPort(b, srv)
	echoIn := []byte(`{"data":"` + strings.Repeat("x", 1000) + `"}`)
	dir := b.TempDir()
	for _, tc := range []struct {
		name, fixture string
		edit          func(m map[string]any)
		input         []byte
	}{
		{"echo-1KiB", "echo_reactor", nil, echoIn},
		{"http-1-exchange", "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port), []byte(fetchInput("http://api.test:"+port+"/", nil))},
	} {
		e := newExecutor(b, loopbackEgress, func(c executor.Config) executor.Config { return c.WithPoolSize(2) })
		tool := load(b, e, tc.fixture, tc.edit)
		re := newExecutor(b, loopbackEgress, func(c executor.Config) executor.Config { return c.WithPoolSize(2).WithRecordable(true) })
		rtool := load(b, re, tc.fixture, tc.edit)
		req := executor.Request{Input: tc.input, Context: executor.CallContext{TenantID: "t", RunID: "r"}}
		seq := 0
		call := func(b *testing.B, tl *executor.Tool, record bool, write int) {
			r := req
			if record {
				r.Record = executor.NewRecorder(executor.RecordOptions{})
			}
			if _, err := tl.Invoke(context.Background(), r); err != nil {
				b.Fatal(err)
			}
			switch write {
			case toMemory:
				if _, err := r.Record.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			case toFile: // a new file, as serve names each kept recording
				seq++
				f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-%d.rec.jsonl", tc.name, seq)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Record.WriteTo(f); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		}
		variants := []recordVariant{
			{name: "off", call: func(b *testing.B) { call(b, tool, false, notWritten) }},
			{name: "recordable-off", call: func(b *testing.B) { call(b, rtool, false, notWritten) }},
			{name: "record", call: func(b *testing.B) { call(b, rtool, true, notWritten) }},
			{name: "record-write", call: func(b *testing.B) { call(b, rtool, true, toMemory) }},
			{name: "record-file", call: func(b *testing.B) { call(b, rtool, true, toFile) }},
			{name: "fresh-file", call: func(b *testing.B) { call(b, tool, true, toFile) }},
		}
		clean := func() { // between batches, untimed: the files a batch wrote
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
		if *recordOnly != "" { // off stays: it is the baseline
			variants = slices.DeleteFunc(variants, func(v recordVariant) bool {
				return v.name != "off" && !slices.Contains(strings.Split(*recordOnly, ","), v.name)
			})
		}
		for _, v := range variants { // warm: pools filled, first-call paths taken
			for i := 0; i < 3; i++ {
				v.call(b)
			}
		}
		clean()
		b.Run(tc.name, func(b *testing.B) { interleave(b, 15, variants, clean) })

		rec := executor.NewRecorder(executor.RecordOptions{})
		r := req
		r.Record = rec
		if _, err := tool.Invoke(context.Background(), r); err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		if _, err := rec.WriteTo(&sb); err != nil {
			b.Fatal(err)
		}
		parsed, err := executor.ReadRecording(strings.NewReader(sb.String()))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"-replay", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				rep, err := tool.Replay(context.Background(), parsed)
				if err != nil || !rep.Identical {
					b.Fatalf("%v %q", err, rep.Divergence)
				}
			}
		})
	}
}

// -record.only names the variants BenchmarkRecord runs besides off
// (comma-separated; empty: all), e.g. for a profile of one.
var recordOnly = flag.String("record.only", "", "BenchmarkRecord: the variants to run besides off (comma-separated)")

// How BenchmarkRecord's call writes its recording.
const (
	notWritten = iota
	toMemory   // WriteTo(io.Discard): encoding alone
	toFile     // a new file created, written and closed
)

// A recordVariant is one way of making the benchmark's call.
type recordVariant struct {
	name string
	call func(b *testing.B)
}

// interleave runs rounds rounds of b.N calls of every variant, in an order
// shuffled every round, and reports each variant's medians (BenchmarkRecord).
func interleave(b *testing.B, rounds int, vs []recordVariant, between func()) {
	runtime.LockOSThread() // the thread clock is this goroutine's
	defer runtime.UnlockOSThread()
	clock := limits.CurrentThread()
	type sample struct{ thread, proc, wall, allocs, bytes []float64 }
	s := make([]sample, len(vs))
	var ms runtime.MemStats
	b.ResetTimer()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < rounds; round++ {
		for _, j := range rng.Perm(len(vs)) {
			runtime.ReadMemStats(&ms)
			m0, by0 := ms.Mallocs, ms.TotalAlloc
			w0, t0, p0 := time.Now(), clock.Now(), processCPU(b)
			for i := 0; i < b.N; i++ {
				vs[j].call(b)
			}
			t1, p1, w1 := clock.Now(), processCPU(b), time.Now()
			runtime.ReadMemStats(&ms)
			n := float64(b.N)
			s[j].thread = append(s[j].thread, float64(t1-t0)/1e3/n)
			s[j].proc = append(s[j].proc, float64(p1-p0)/1e3/n)
			s[j].wall = append(s[j].wall, float64(w1.Sub(w0))/1e3/n)
			s[j].allocs = append(s[j].allocs, float64(ms.Mallocs-m0)/n)
			s[j].bytes = append(s[j].bytes, float64(ms.TotalAlloc-by0)/n)
			between()
			runtime.GC() // untimed: no batch pays for an earlier one's garbage
		}
	}
	b.StopTimer()
	if !limits.Supported() {
		b.Skip("no per-thread CPU clock here")
	}
	off := s[0]
	// A ratio is the median of the rounds' ratios (each over the same
	// round's off): a round's batches are close in time, so a load change
	// between rounds cancels out.
	ratio := func(xs, base []float64) float64 {
		rs := make([]float64, len(xs))
		for i := range xs {
			rs[i] = xs[i] / base[i]
		}
		return median(rs)
	}
	for j, v := range vs {
		b.ReportMetric(median(s[j].thread), v.name+"-thread-us")
		b.ReportMetric(median(s[j].proc), v.name+"-proc-us")
		b.ReportMetric(median(s[j].wall), v.name+"-wall-us")
		b.ReportMetric(median(s[j].allocs), v.name+"-allocs")
		if j > 0 {
			b.ReportMetric(ratio(s[j].thread, off.thread), v.name+"/off-thread")
			b.ReportMetric(ratio(s[j].proc, off.proc), v.name+"/off-proc")
			b.ReportMetric(ratio(s[j].wall, off.wall), v.name+"/off-wall")
		}
	}
	b.ReportMetric(median(off.wall)*1e3, "ns/op")
	b.ReportMetric(median(off.allocs), "allocs/op")
	b.ReportMetric(median(off.bytes), "B/op")
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if n := len(ys); n%2 == 1 {
		return ys[n/2]
	} else if n > 0 {
		return (ys[n/2-1] + ys[n/2]) / 2
	}
	return 0
}
