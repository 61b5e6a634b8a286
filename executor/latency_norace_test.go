//go:build !race

package executor_test

import "time"

// stopBound is the interrupt latency (p99) the tests accept: 10 ms, the
// design's bound (issue 12 §1).
const stopBound = 10 // ms

const raceEnabled = false

// poolPause is how long the deadline measurements wait between calls, for
// the pool to refill in the background.
const poolPause = 30 * time.Millisecond
