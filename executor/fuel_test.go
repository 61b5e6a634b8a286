package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Every fixture compiler we support is metered, and a metered guest is still
// stopped by the CPU budget, the wall deadline and cancellation.
func TestFuelMetering(t *testing.T) {
	e := newExecutor(t)
	for _, fx := range []string{"echo_reactor", "echo_command", "go_echo_reactor", "go_echo_command", "loop", "spin_command", "trap"} {
		if tool := load(t, e, fx, nil); !tool.Metered() {
			t.Errorf("%s is not metered", fx)
		}
	}
	for _, fx := range []string{"loop", "spin_command"} {
		tool := load(t, e, fx, withLimits(64, 60_000))
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		start := time.Now()
		_, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
		cancel()
		wantCode(t, err, toolerr.DeadlineExceeded)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: deadline answered after %v", fx, d)
		}
	}
}
