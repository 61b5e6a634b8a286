//go:build race

package executor_test

import "time"

// stopBound is the interrupt latency (p99) the tests accept. The race
// detector slows the host side (every chunked copy is checked), so a -race
// run gets a looser bound than the 10 ms the design promises.
const stopBound = 40 // ms

const raceEnabled = true

// poolPause is how long the deadline measurements wait between calls, for
// the pool to refill in the background.
const poolPause = 100 * time.Millisecond
