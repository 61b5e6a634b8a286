package executor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// BenchmarkInvoke measures one validated call of a 1 KiB echo on a fresh
// instance, from the pre-warmed pool and without it, and on a reused warm
// instance (posture none).
func BenchmarkInvoke(b *testing.B) {
	input := []byte(`{"data":"` + strings.Repeat("x", 1000) + `"}`)
	for _, tc := range []struct {
		name    string
		fixture string
		posture string
		pool    int
	}{
		{"wat/isolated-pooled", "echo_reactor", "context-isolated", 2},
		{"wat/isolated-unpooled", "echo_reactor", "context-isolated", 0},
		{"wat/none-reused", "echo_reactor", "none", 0},
		{"go/isolated-pooled", "go_echo_reactor", "context-isolated", 2},
		{"go/isolated-unpooled", "go_echo_reactor", "context-isolated", 0},
		{"go/none-reused", "go_echo_reactor", "none", 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newExecutor(b, func(c executor.Config) executor.Config { return c.WithPoolSize(tc.pool) })
			tool := load(b, e, tc.fixture, posture(tc.posture))
			req := executor.Request{Input: input}
			if _, err := tool.Invoke(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(input)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tool.Invoke(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(tool.Stats().RecycledCalls)/float64(b.N+1), "recycled/op")
		})
	}
}
