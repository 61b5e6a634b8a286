//go:build race

package mcp_test

// raceEnabled reports a -race build: the race detector slows the Go code
// (the SDK, the HTTP path) many times, so latency bounds are not checked.
const raceEnabled = true
