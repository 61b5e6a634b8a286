//go:build race

package executor_test

import "time"

// stopBound is the interrupt latency (p99) the tests accept. The race
// detector slows every Go side of a call 5-20x: the chunked host copies,
// and the set-up of a fresh 60 MiB instance when the pool is empty (its
// snapshot scans the memory in Go), which runs before the guest and so
// past a 100 ms deadline (measured under -race with nothing else running:
// fill/copy deadline rows p99 150-170 ms at first, 257-436 ms on
// 2026-12-01, and 549 ms once in make test, where a second -race test
// binary shares the two cores; every other row under 60 ms; without -race
// every row is under 10 ms). So -race asserts only what the findings broke
// — stops that took seconds to minutes, or never came — and the 10 ms bound
// of the design is asserted by the non-race build.
const stopBound = 1000 // ms

const raceEnabled = true

// poolPause is how long the deadline measurements wait between calls, for
// the pool to refill in the background.
const poolPause = 100 * time.Millisecond
