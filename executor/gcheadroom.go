package executor

import (
	"math"
	"os"
	"runtime/debug"
	"sync"
)

// DefaultGCHeadroom is the heap headroom New gives the process's garbage
// collector (Config.WithGCHeadroom): 64 MiB.
const DefaultGCHeadroom = 64 << 20

// The process's GC ballast: one never-written allocation (raiseGCHeadroom),
// the largest any Config asked for, kept for the life of the process.
var (
	ballastMu sync.Mutex
	ballast   []byte
)

// raiseGCHeadroom makes the garbage collector let n more bytes of garbage
// pile up between collections than the live heap alone would (at GOGC=100
// the heap goal is twice what is live, and at least 4 MiB): it keeps a live
// allocation of n bytes that nothing ever writes, so it costs address
// space, not memory (the pages are never touched: a fresh large allocation
// is not zeroed), and the GC, which never scans it (it holds no pointers),
// counts it as live.
//
// sandboxd's live heap is small (a few MiB) and a call allocates about
// 2 KB, so at GOGC=100 the GC ran every few milliseconds under load (166
// collections a second at 200k calls/s); each collection preempts the
// goroutines running calls, which are locked to their threads (the
// per-thread CPU clock), and a locked goroutine's preemption hands its P to
// another thread and back through the kernel. On 2 cores that left a
// fifth of the second core idle. With 64 MiB the 1 KiB echo from 4
// goroutines ran 5.4-5.6 -> 3.1-3.2 µs a call at GOMAXPROCS 2.
//
// It does nothing when the operator tuned the collector (GOGC or
// GOMEMLIMIT set, or a memory limit set with debug.SetMemoryLimit: the
// ballast would count against it) or n <= 0. It reports whether the
// ballast is in place.
func raiseGCHeadroom(n int64) bool {
	if !gcHeadroomAllowed(n, os.Getenv, debug.SetMemoryLimit(-1)) {
		return false
	}
	ballastMu.Lock()
	defer ballastMu.Unlock()
	if int64(len(ballast)) < n {
		ballast = make([]byte, n)
	}
	return true
}

// gcHeadroomAllowed reports whether raiseGCHeadroom may add n bytes of
// headroom, given the environment and the process's memory limit.
func gcHeadroomAllowed(n int64, getenv func(string) string, memoryLimit int64) bool {
	return n > 0 && getenv("GOGC") == "" && getenv("GOMEMLIMIT") == "" && memoryLimit == math.MaxInt64
}
