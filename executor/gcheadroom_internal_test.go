package executor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
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

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, 1600},       // the ceiling: 4 MiB × 16 = the headroom
		{2 * mib, 64 * mib, 1600}, // 3200 would make the smallest goal 128 MiB
		{16 * mib, 64 * mib, 400}, // goal 80 MiB = live + headroom
		{64 * mib, 64 * mib, 100},
		{512 * mib, 64 * mib, 100}, // never under GOGC's default
		{mib, 4 * mib, 100},        // no headroom past the runtime's own 4 MiB
	} {
		if got := gcPercentFor(c.live, c.headroom); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

// pauseProcessGC keeps the process's tuner out of a test that sets the GC
// percentage, and puts it back afterwards.
func pauseProcessGC(t *testing.T) {
	processGC.mu.Lock()
	was := processGC.stopped
	processGC.stopped = true
	saved := debug.SetGCPercent(100)
	processGC.mu.Unlock()
	t.Cleanup(func() {
		processGC.mu.Lock()
		defer processGC.mu.Unlock()
		processGC.stopped = was
		debug.SetGCPercent(saved)
		if !was && !processGC.armed && processGC.last != 0 {
			processGC.armed = true
			processGC.arm()
		}
	})
}

func heapSample(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestGCTunerRaisesGoal: after a collection and a tune the GC percentage is
// gcPercentFor's and the heap goal is about the live heap plus the headroom.
func TestGCTunerRaisesGoal(t *testing.T) {
	pauseProcessGC(t)
	const headroom = 256 << 20
	var tu gcTuner
	tu.headroom = headroom
	runtime.GC()
	live, goal0 := heapSample("/gc/heap/live:bytes"), heapSample("/gc/heap/goal:bytes")
	tu.mu.Lock()
	ok := tu.tuneLocked()
	tu.mu.Unlock()
	if !ok {
		t.Fatal("the tuner stopped at GOGC=100")
	}
	goal := heapSample("/gc/heap/goal:bytes")
	t.Logf("live %d KiB, heap goal %d -> %d MiB, GC percent %d", live>>10, goal0>>20, goal>>20, tu.last)
	if tu.last != gcPercentFor(live, headroom) {
		t.Errorf("percent %d, want gcPercentFor(%d, %d) = %d", tu.last, live, headroom, gcPercentFor(live, headroom))
	}
	if goal < live+headroom*3/4 || goal > 2*live+headroom*5/4 {
		t.Errorf("heap goal %d MiB, want about live (%d MiB) + %d MiB", goal>>20, live>>20, headroom>>20)
	}
}

// TestGCTunerYields: the tuner follows each collection through its
// sentinel's finalizer, and a percentage set by someone else stops it
// for good with theirs in place.
func TestGCTunerYields(t *testing.T) {
	pauseProcessGC(t)
	var tu gcTuner
	if !tu.raise(64 << 20) {
		t.Fatal("raise refused at GOGC=100")
	}
	debug.SetGCPercent(150)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		tu.mu.Lock()
		stopped, armed := tu.stopped, tu.armed
		tu.mu.Unlock()
		if stopped && !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no collection reached the tuner in 10 s (stopped %v, armed %v)", stopped, armed)
		}
		time.Sleep(time.Millisecond)
	}
	if p := debug.SetGCPercent(150); p != 150 {
		t.Errorf("the tuner left GC percent %d, not the 150 set after it", p)
	}
	if tu.raise(64 << 20) {
		t.Error("a stopped tuner started again")
	}

	// A memory limit set later stops it too, with GOGC's default back.
	var tm gcTuner
	debug.SetGCPercent(100)
	if !tm.raise(64 << 20) {
		t.Fatal("raise refused at GOGC=100")
	}
	old := debug.SetMemoryLimit(1 << 40)
	defer debug.SetMemoryLimit(old)
	tm.mu.Lock()
	ok := tm.tuneLocked()
	tm.mu.Unlock()
	if ok {
		t.Error("the tuner ran on under a memory limit")
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("under a memory limit the tuner left GC percent %d, not 100", p)
	}
}
