// goloop is the benchmark guest: a GOOS=wasip1 command whose main runs a
// tight loop of os.Args[1] iterations, updating a package-level variable
// (so the loop is not optimised away) and never calling the host, like
// testdata/wasm/go/spin_command but bounded. bench_test.go builds it.
package main

import (
	"os"
	"strconv"
)

var spins uint64

func main() {
	n, err := strconv.ParseUint(os.Args[1], 10, 64)
	if err != nil {
		os.Exit(3)
	}
	for i := uint64(0); i < n; i++ {
		spins++
	}
	if spins != n {
		os.Exit(4)
	}
}
