//go:build linux

package limits

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadClock reads the CPU time consumed by one OS thread. It is obtained on
// the thread to measure (which must be locked with runtime.LockOSThread for
// the measurement to mean anything) and may be read from any goroutine, so a
// watchdog can observe a guest while it runs.
type ThreadClock struct {
	clockid int32
}

// CurrentThread returns the CPU clock of the calling OS thread.
func CurrentThread() ThreadClock {
	tid := syscall.Gettid()
	// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) from the Linux kernel:
	// ((~tid) << 3) | CPUCLOCK_PERTHREAD_MASK(4) | CPUCLOCK_SCHED(2).
	return ThreadClock{clockid: int32((^uint32(tid))<<3) | 6}
}

// Supported reports whether per-thread CPU clocks work on this system.
func Supported() bool { return true }

// Now returns the thread's consumed CPU time. It returns 0 if the thread has
// exited (the clock is then invalid).
func (c ThreadClock) Now() time.Duration {
	var ts syscall.Timespec
	// RawSyscall: clock_gettime never blocks, so the scheduler need not
	// be told (entersyscall/exitsyscall on every read, two per call).
	_, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, uintptr(c.clockid), uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0
	}
	return time.Duration(ts.Sec)*time.Second + time.Duration(ts.Nsec)
}
