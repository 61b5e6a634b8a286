//go:build !race

package fuel

const raceEnabled = false
