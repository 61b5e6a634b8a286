//go:build race

package fuel

// raceEnabled reports a -race build, in which wazero compiles the multi-MB
// Go fixtures too slowly for the test suite.
const raceEnabled = true
