package executor

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultGCHeadroom is the heap headroom New gives the process's garbage
// collector (Config.WithGCHeadroom): 64 MiB.
const DefaultGCHeadroom = 64 << 20

// processGC is the process's one GC tuner (raiseGCHeadroom).
var processGC gcTuner

// raiseGCHeadroom makes the garbage collector let about n bytes of garbage
// pile up between collections however small the live heap is (at GOGC=100
// the heap goal is twice what is live, and at least 4 MiB). After every
// collection it sets the GC percentage from the live heap the collection
// found (gcPercentFor), so the next goal is about live + n while the live
// heap is under n, and GOGC=100's 2 × live once it is over.
//
// sandboxd's live heap is small (a few MiB) and a call allocates about
// 2 KB, so at GOGC=100 the GC ran every few milliseconds under load (166
// collections a second at 200k calls/s); each collection preempts the
// goroutines running calls, which are locked to their threads (the
// per-thread CPU clock), and a locked goroutine's preemption hands its P to
// another thread and back through the kernel. On 2 cores that left a
// fifth of the second core idle.
//
// The cost is memory: up to n bytes of garbage are resident between
// collections. (An earlier version kept a never-written n-byte ballast
// instead; that costs nothing only while the allocation comes from pages
// the process never touched, and a process whose heap had grown and
// shrunk before New zeroed, so touched, all of it.)
//
// It does nothing when the operator tuned the collector (GOGC or
// GOMEMLIMIT set, or a memory limit set with debug.SetMemoryLimit) or
// n <= 0, and it stops for good, leaving the operator's setting, when
// anything else in the process changes the GC percentage or sets a memory
// limit later. It reports whether the tuner runs.
func raiseGCHeadroom(n int64) bool {
	if !gcHeadroomAllowed(n, os.Getenv, debug.SetMemoryLimit(-1)) {
		return false
	}
	return processGC.raise(n)
}

// gcHeadroomAllowed reports whether raiseGCHeadroom may add n bytes of
// headroom, given the environment and the process's memory limit.
func gcHeadroomAllowed(n int64, getenv func(string) string, memoryLimit int64) bool {
	return n > 0 && getenv("GOGC") == "" && getenv("GOMEMLIMIT") == "" && memoryLimit == math.MaxInt64
}

// minHeapGoal is the Go runtime's smallest heap goal at GOGC=100; it
// scales with the percentage.
const minHeapGoal = 4 << 20

// gcPercentFor is the GC percentage that puts the next heap goal at about
// live + headroom: headroom/live × 100, at least GOGC's default of 100 and
// at most the percentage whose smallest heap goal (4 MiB × percent/100) is
// the headroom itself, so a tiny live heap does not lift the goal past it.
func gcPercentFor(live, headroom uint64) int {
	const most = 1 << 20
	if headroom <= minHeapGoal {
		return 100
	}
	ceiling := min(headroom*100/minHeapGoal, most)
	if live == 0 {
		return int(ceiling)
	}
	return int(max(min(headroom*100/live, ceiling), 100))
}

// gcTuner sets the GC percentage after each collection (see raiseGCHeadroom).
type gcTuner struct {
	mu       sync.Mutex
	headroom uint64 // the largest any Config asked for
	last     int    // the percentage last set; 0 before the first
	armed    bool   // a sentinel's finalizer runs collected after the next collection
	stopped  bool   // something else set the percentage or a memory limit
}

// raise makes the headroom at least n and tunes at once.
func (t *gcTuner) raise(n int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.headroom = max(t.headroom, uint64(n))
	if !t.tuneLocked() {
		return false
	}
	if !t.armed {
		t.armed = true
		t.arm()
	}
	return true
}

// gcSentinel is garbage from birth: its finalizer runs after the first
// collection that finds it (an object with a pointer field, so that it is
// never one of the runtime's combined tiny allocations, which hold no
// pointers and whose finalizers may never run).
type gcSentinel struct{ t *gcTuner }

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t: t}, func(s *gcSentinel) { s.t.collected() })
}

// collected runs after each collection: it tunes, and watches for the
// next collection unless the tuner stopped.
func (t *gcTuner) collected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tuneLocked() {
		t.arm()
	} else {
		t.armed = false
	}
}

// tuneLocked sets the percentage from the live heap of the last
// collection. It reports false, and stops for good, when the percentage is
// not the one it last set (or 100, before the first: it leaves another's
// percentage as it is) or a memory limit has been set (it puts back 100).
func (t *gcTuner) tuneLocked() bool {
	if t.stopped {
		return false
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	var v uint64
	if live[0].Value.Kind() == metrics.KindUint64 {
		v = live[0].Value.Uint64()
	}
	want := gcPercentFor(v, t.headroom)
	expect := t.last
	if expect == 0 {
		expect = 100
	}
	old := debug.SetGCPercent(want)
	switch {
	case old != expect:
		debug.SetGCPercent(old)
		t.stopped = true
	case debug.SetMemoryLimit(-1) != math.MaxInt64:
		debug.SetGCPercent(100)
		t.stopped = true
	default:
		t.last = want
	}
	return !t.stopped
}
