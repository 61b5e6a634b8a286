//go:build !race

package executor_test

// stopBound is the interrupt latency (p99) the tests accept: 10 ms, the
// design's bound (issue 12 §1).
const stopBound = 10 // ms

const raceEnabled = false
