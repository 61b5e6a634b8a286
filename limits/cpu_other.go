//go:build !linux

package limits

import "time"

// ThreadClock reads the CPU time consumed by one OS thread. On this platform
// per-thread CPU clocks are not available and it falls back to wall time from
// the moment it was obtained, which over-charges a guest that blocks.
type ThreadClock struct{ start time.Time }

// CurrentThread returns the CPU clock of the calling OS thread.
func CurrentThread() ThreadClock { return ThreadClock{start: time.Now()} }

// Supported reports whether per-thread CPU clocks work on this system.
func Supported() bool { return false }

// Now returns the time charged so far.
func (c ThreadClock) Now() time.Duration { return time.Since(c.start) }
