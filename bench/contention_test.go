package bench

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// BenchmarkInvokeParallel calls the 1 KiB validated WAT echo from
// parallel goroutines (RunParallel: GOMAXPROCS×-cpu of them) with the
// posture given, for contention profiles of the per-call path:
//
//	go test -run '^$' -bench InvokeParallel -cpu 1,2 -mutexprofile mu.out -blockprofile block.out .
func BenchmarkInvokeParallel(b *testing.B) {
	path := filepath.Join(root(b), "testdata/wasm/echo_reactor.wasm")
	in := payload(1 << 10)
	for _, posture := range []string{"context-isolated", "none"} {
		b.Run(posture, func(b *testing.B) {
			tool := loadTool(b, newExecutor(b, b.TempDir(), 8), toolManifest("bench.par", fsRef(path), true, posture, 5000))
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(2) // 2×GOMAXPROCS goroutines: 4 at GOMAXPROCS 2, as the scaling row
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tool.Invoke(ctx, executor.Request{Input: in}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
