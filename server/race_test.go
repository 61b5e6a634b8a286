//go:build race

package server_test

// raceEnabled reports a -race build: the race detector slows Go code (the
// HTTP path, the host functions), not the guests' compiled code, so
// latency bounds on Go work are loosened.
const raceEnabled = true
