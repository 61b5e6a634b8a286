package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// recording is issue 28's row: what recording costs a call (docs/replay.md
// "Cost"; goal ≤ 1.10× of the same call unrecorded) for the 1 KiB echo and
// a Go guest's call with one loopback HTTP exchange. Off is a plain
// executor's call; recorded is a recordable executor's (serve
// --record-failures) with a Recorder, not written (a successful call
// there) and written to a new file (a kept one). The cases of each table
// are measured round-robin like the per-call tables.
func recording(t *testing.T, r *report) {
	ctx := context.Background()
	cache := t.TempDir()
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items":[1,2,3]}`)
	}))
	defer srv.Close()
	host := srv.Listener.Addr().(*net.TCPAddr).AddrPort().String()
	loopback := func(c executor.Config) executor.Config {
		return c.WithEgressAllowCIDRs(netip.MustParsePrefix("127.0.0.0/8"))
	}
	recordable := func(c executor.Config) executor.Config { return c.WithRecordable(true) }
	echo := filepath.Join(root(t), "testdata/wasm/echo_reactor.wasm")
	fetch := filepath.Join(root(t), "testdata/wasm/http_fetch_reactor.wasm")
	fetchManifest := []byte(fmt.Sprintf(`{"id":"bench.fetch","description":"bench","version":"1.0.0","sandbox":"context-isolated",
"input":{},"output":{},"codeArtifactRef":%s,"network":{"kind":"allowlist","hosts":[%q]},"limits":{"memMB":64,"cpuMs":5000}}`, fsRef(fetch), host))
	r.p("## Recording (issue 28: goal ≤ 1.10× of the call unrecorded)")
	r.p("")
	r.p("*off*: a plain executor's call. *recorded*: a recordable executor's (`WithRecordable`, what `serve --record-failures` makes) with a `Recorder`: not written (a successful call there, whose recording is dropped) or written to a new file (created, written, closed: a kept recording; the files are removed after the table). A recorded call of a context-isolated tool runs on a pooled (recycled) instance like any call. Wall-clock p50 of individually timed calls, round-robin; `go test -run '^$' -bench BenchmarkRecord ./executor` measures the same calls in thread and process CPU time.")
	r.p("")
	seq := 0
	for _, c := range []struct {
		name     string
		manifest []byte
		input    []byte
		warm     int
		slice    time.Duration
	}{
		{"1 KiB echo (WAT reactor)", toolManifest("bench.rececho", fsRef(echo), true, "context-isolated", 5000), payload(1 << 10), 20, 100 * time.Millisecond},
		{"one loopback HTTP exchange (Go guest)", fetchManifest, []byte(`{"url":"http://` + host + `/"}`), 3, 250 * time.Millisecond},
	} {
		plain := loadTool(t, newExecutor(t, cache, 2, loopback), c.manifest)
		rec := loadTool(t, newExecutor(t, cache, 2, loopback, recordable), c.manifest)
		call := func(tool *executor.Tool, record, write bool) func() error {
			return func() error {
				req := executor.Request{Input: c.input}
				if record {
					req.Record = executor.NewRecorder(executor.RecordOptions{})
				}
				if _, err := tool.Invoke(ctx, req); err != nil {
					return err
				}
				if !write {
					return nil
				}
				seq++
				f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.rec.jsonl", seq)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return err
				}
				if _, err := req.Record.WriteTo(f); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}
		}
		cases := []callCase{
			{"off", call(plain, false, false)},
			{"recorded, not written", call(rec, true, false)},
			{"recorded, written to a file", call(rec, true, true)},
		}
		list := make([]func() error, len(cases))
		for i, cc := range cases {
			list[i] = cc.fn
		}
		res, err := interleaved(list, c.warm, 8, 100000, c.slice)
		if err != nil {
			t.Fatal(err)
		}
		r.p("### %s", c.name)
		r.p("")
		r.p("| case | p50 µs | p99 µs | allocs/op | B/op | calls |")
		r.p("|---|---:|---:|---:|---:|---:|")
		for i, cc := range cases {
			r.p("| %s | %s | %s | %.0f | %.0f | %d |", cc.name, us(res[i].p50), us(res[i].p99), res[i].allocs, res[i].bytes, res[i].n)
		}
		r.p("")
		r.p("| ratio (p50) | |")
		r.p("|---|---:|")
		for i := 1; i < len(cases); i++ {
			x := ratioOf(res[i].p50, res[0].p50)
			v := addGoal(fmt.Sprintf("recording overhead, %s: %s / off", c.name, cases[i].name), fmtRatio(x), "≤ 1.10×", x <= 1.10)
			r.p("| **%s / off** (goal ≤ 1.10×: %s) | **%s** |", cases[i].name, v, fmtRatio(x))
		}
		r.p("")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
