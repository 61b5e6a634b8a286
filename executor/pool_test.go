package executor_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// A pool that callers keep finding empty grows toward its size; an idle one
// shrinks back to one instance.
func TestPoolAdaptsToLoad(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithPoolSize(4).WithPoolBudget(executor.DefaultPoolBudget, 300*time.Millisecond).WithRecycling(false)
	})
	tool := load(t, e, "go_echo_reactor", nil)
	if _, target := poolStats(tool); target != 2 {
		t.Fatalf("initial target %d, want 2", target)
	}
	// A Go instance takes hundreds of microseconds to build even from the
	// tool's image, and recycling is off: back-to-back calls drain the pool
	// faster than it refills. (Recycled instances come back at once: such
	// a pool never runs dry.)
	grew := false
	for i := 0; i < 40 && !grew; i++ {
		if _, err := invoke(t, tool, `{"i":1}`); err != nil {
			t.Fatal(err)
		}
		_, target := poolStats(tool)
		grew = target > 2
	}
	if !grew {
		t.Fatal("the pool never grew although calls kept finding it empty")
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ready, target := poolStats(tool); target == 1 && ready <= 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ready, target := poolStats(tool)
	t.Fatalf("idle pool did not shrink: ready %d, target %d", ready, target)
}

// The executor's pool budget bounds the memory of all idle instances: with
// a budget smaller than one instance nothing is kept, and calls still work.
func TestPoolBudget(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithPoolSize(4).WithPoolBudget(1, time.Minute)
	})
	tool := load(t, e, "echo_reactor", nil)
	for i := 0; i < 5; i++ {
		res, err := invoke(t, tool, `{"a":1}`)
		if err != nil || string(res.Output) != `{"a":1}` {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if ready, _ := poolStats(tool); ready != 0 || e.PooledBytes() != 0 {
		t.Fatalf("over budget: ready %d, pooled bytes %d", ready, e.PooledBytes())
	}

	e2 := newExecutor(t)
	tool2 := load(t, e2, "echo_reactor", nil)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ready, _ := poolStats(tool2); ready == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each instance holds its page of linear memory; the copy it is reset
	// from (recycling, instance.reset) keeps only non-zero chunks, and this
	// guest's memory is all zero after initialisation.
	if ready, _ := poolStats(tool2); ready != 2 || e2.PooledBytes() != 2*65536 {
		t.Fatalf("default pool: ready %d, pooled bytes %d (want 2 instances of 1 page)", ready, e2.PooledBytes())
	}
	tool2.Close(t.Context())
	if e2.PooledBytes() != 0 {
		t.Fatalf("closing the tool left %d pooled bytes", e2.PooledBytes())
	}
}

// poolStats is tool's pre-warmed instances: ready now, and the target.
func poolStats(tool *executor.Tool) (ready, target int) {
	s := tool.Stats()
	return s.PoolReady, s.PoolTarget
}
