package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// The executor's default timeout ends a call whose context has no deadline
// (a spinning guest, with a CPU budget far beyond it), and a deadline of the
// caller's replaces it.
func TestDefaultTimeoutEndsCall(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithDefaultTimeout(100 * time.Millisecond) })
	tool := load(t, e, "loop", withLimits(16, 10000))
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		min  time.Duration
	}{
		{"default", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, 100 * time.Millisecond},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
			took := time.Since(start)
			t.Logf("ended after %v: %v", took, err)
			wantCode(t, err, toolerr.DeadlineExceeded)
			if took < tc.min || took > tc.min+5*time.Second {
				t.Fatalf("ended after %v, want %v (+ at most 5 s)", took, tc.min)
			}
		})
	}
}
