//go:build unix

package executor_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// echoSchema is the bench module's validated echo schema (input and output).
const echoSchema = `{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`

// BenchmarkParallelEcho is issue 17's scaling workload as a parallel
// microbenchmark: the 1 KiB validated echo (WAT guest) called from 4
// goroutines whatever GOMAXPROCS is (as bench/ does), in both postures the
// scaling rows measure, with a pool of 8. Run it at -cpu 1,2 and compare
// ns/op; with -cpuprofile / -memprofile it shows what the per-call path
// costs and what it shares. It reports the process's CPU time per call
// (cpu-ns/op, user+system from getrusage) besides the wall time: on a
// shared machine the wall time at -cpu 2 says how much of the second core
// the run got, the CPU time what a call costs there.
//
//	go test -run '^$' -bench ParallelEcho -cpu 1,2 -benchtime 2s -cpuprofile cpu.out ./executor/
func BenchmarkParallelEcho(b *testing.B) {
	input := []byte(`{"data":"` + strings.Repeat("x", 1<<10) + `"}`)
	for _, p := range []string{"context-isolated", "none"} {
		b.Run(p, func(b *testing.B) {
			e := newExecutor(b, func(c executor.Config) executor.Config { return c.WithPoolSize(8) })
			tool := load(b, e, "echo_reactor", func(m map[string]any) {
				m["sandbox"] = p
				m["input"] = json.RawMessage(echoSchema)
				m["output"] = json.RawMessage(echoSchema)
			})
			ctx := context.Background()
			if _, err := tool.Invoke(ctx, executor.Request{Input: input}); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(max(4/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			b.SetBytes(int64(len(input)))
			b.ResetTimer()
			cpu0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := tool.Invoke(ctx, executor.Request{Input: input})
					if err != nil {
						b.Error(err)
						return
					}
					if len(res.Output) != len(input) {
						b.Errorf("output %d bytes, want %d", len(res.Output), len(input))
						return
					}
				}
			})
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the user+system CPU time the process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
