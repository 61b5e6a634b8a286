package executor_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// procStatus returns a field of /proc/self/status in bytes (0 when absent).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field+":") {
			continue
		}
		f := strings.Fields(line[len(field)+1:])
		if len(f) == 0 {
			return 0
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		return kb << 10
	}
	return 0
}

// rssProbe measures the peak resident set size of the process while fn
// runs, relative to the RSS just before (after a collection that returns
// freed memory). The tests of this package share one process, so it
// measures a delta: the kernel's high-water mark is reset first
// (/proc/self/clear_refs) where that works, and a sampler every millisecond
// covers the rest.
func rssProbe(t *testing.T, fn func()) (growth int64) {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status on this system")
	}
	runtime.GC()
	debug.FreeOSMemory()
	hwmReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	base := procStatus("VmRSS")
	var peak int64
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if r := procStatus("VmRSS"); r > 0 {
				mu.Lock()
				peak = max(peak, r)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	<-done
	if hwmReset {
		peak = max(peak, procStatus("VmHWM"))
	}
	growth = peak - base
	t.Logf("RSS before %.1f MiB, peak %.1f MiB, growth %.1f MiB (high-water mark reset: %v)",
		float64(base)/(1<<20), float64(peak)/(1<<20), float64(growth)/(1<<20), hwmReset)
	return growth
}

// rssBound is issue 12's bound on what a call of a memMB tool may make the
// process hold: memMB × 1.25 + 32 MiB.
func rssBound(memMB int64) int64 { return memMB<<20*5/4 + 32<<20 }

// F06: a reactor writing its whole 200 MiB memory to stdout and stderr in
// one fd_write each (no newline). The forwarders keep no copy of a write
// (a 64 KiB partial line and a 4 KiB tail at most), so the process grows by
// about the guest's own memory, within memMB × 1.25 + 32 MiB; the forwarded
// output stops at the per-call cap.
func TestF06ForwarderMemory(t *testing.T) {
	var out, errs countingWriter
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithPoolSize(0).WithGuestOutput(&out, &errs)
	})
	const memMB = 210
	tool := load(t, e, "f06_forwarder_memory", withLimits(memMB, 20000))
	growth := rssProbe(t, func() {
		if _, err := invoke(t, tool, `{}`); err != nil {
			t.Errorf("call: %v", err)
		}
	})
	if bound := rssBound(memMB); growth > bound {
		t.Fatalf("RSS grew by %d MiB for a memMB %d tool; bound %d MiB", growth>>20, memMB, bound>>20)
	}
	for name, w := range map[string]*countingWriter{"stdout": &out, "stderr": &errs} {
		n := w.n.Load()
		t.Logf("%s: %d bytes forwarded", name, n)
		if n > 1<<20+64<<10 || n == 0 {
			t.Fatalf("%s: %d bytes forwarded, want (0, 1 MiB + the drop note]", name, n)
		}
	}
}

// countingWriter counts what is written to it and keeps nothing.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// F07: _initialize logs 20,000 lines of 64 KiB and writes 4 MiB to stdout
// and stderr. Initialisation gets the caps of a call: at most 1000 lines and
// 1 MiB of logs, 1 MiB forwarded per stream, per instance — whether the
// instance is made for a call or by the pool in the background.
func TestF07InitLogFlood(t *testing.T) {
	for _, pool := range []int{0, 2} {
		var lines, logBytes atomic.Int64
		var out, errs countingWriter
		e := newExecutor(t, func(c executor.Config) executor.Config {
			return c.WithPoolSize(pool).WithGuestOutput(&out, &errs).WithLogSink(func(r executor.LogRecord) {
				lines.Add(1)
				logBytes.Add(int64(len(r.Msg)))
			})
		})
		tool := load(t, e, "f07_init_log_flood", withLimits(4, 10000))
		if _, err := invoke(t, tool, `{}`); err != nil {
			t.Fatalf("pool %d: %v", pool, err)
		}
		instances := int64(1)
		if pool > 0 {
			// Let the pool settle: its instances initialise in the background.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if ready, target := poolStats(tool); ready >= target {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			tool.Close(context.Background())
			instances = int64(pool) + 2 // the target may have grown by one; one more may be in flight
		}
		t.Logf("pool %d: %d log lines, %d log bytes, stdout %d, stderr %d bytes", pool, lines.Load(), logBytes.Load(), out.n.Load(), errs.n.Load())
		if lines.Load() == 0 || lines.Load() > instances*1000 || logBytes.Load() > instances<<20 {
			t.Fatalf("pool %d: %d lines / %d bytes of logs for at most %d instances", pool, lines.Load(), logBytes.Load(), instances)
		}
		for name, w := range map[string]*countingWriter{"stdout": &out, "stderr": &errs} {
			if n := w.n.Load(); n == 0 || n > instances*(1<<20+64<<10) {
				t.Fatalf("pool %d: %s forwarded %d bytes for at most %d instances", pool, name, n, instances)
			}
		}
	}
}
