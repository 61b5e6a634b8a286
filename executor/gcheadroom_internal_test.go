package executor

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

func TestGCHeadroomAllowed(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		name  string
		n     int64
		env   func(string) string
		limit int64
		want  bool
	}{
		{"default", DefaultGCHeadroom, env(), math.MaxInt64, true},
		{"off", 0, env(), math.MaxInt64, false},
		{"GOGC set", DefaultGCHeadroom, env("GOGC", "200"), math.MaxInt64, false},
		{"GOMEMLIMIT set", DefaultGCHeadroom, env("GOMEMLIMIT", "1GiB"), math.MaxInt64, false},
		{"memory limit set", DefaultGCHeadroom, env(), 1 << 30, false},
	} {
		if got := gcHeadroomAllowed(c.n, c.env, c.limit); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.want)
		}
	}
}

// TestGCHeadroomCostsNoMemory: the ballast raises the GC's heap goal by its
// size and the process's resident memory by (almost) nothing.
func TestGCHeadroomCostsNoMemory(t *testing.T) {
	if !gcHeadroomAllowed(DefaultGCHeadroom, os.Getenv, debug.SetMemoryLimit(-1)) {
		t.Skip("GOGC, GOMEMLIMIT or a memory limit is set: no ballast")
	}
	if _, err := os.Stat("/proc/self/statm"); err != nil {
		t.Skip("no /proc/self/statm")
	}
	rss := func() int64 {
		b, _ := os.ReadFile("/proc/self/statm")
		f := strings.Fields(string(b))
		pages, _ := strconv.ParseInt(f[1], 10, 64)
		return pages * int64(os.Getpagesize())
	}
	const n = 512 << 20 // over any earlier ballast of this test process
	runtime.GC()
	before := rss()
	if !raiseGCHeadroom(n) {
		t.Fatal("raiseGCHeadroom refused")
	}
	runtime.GC()
	after := rss()
	goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(goal)
	t.Logf("RSS %d -> %d KiB, heap goal %d MiB", before>>10, after>>10, goal[0].Value.Uint64()>>20)
	if after-before > 16<<20 {
		t.Errorf("a %d MiB ballast made %d KiB resident", n>>20, (after-before)>>10)
	}
	if goal[0].Value.Uint64() < n {
		t.Errorf("heap goal %d bytes, under the ballast's %d", goal[0].Value.Uint64(), n)
	}
}
