package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// TestCloseWhileGuestRuns closes a tool (or its executor) while a call on it
// is still running a hostile guest. Close used to close the wazero runtime
// at once: that unmaps the instance's linear memory (limits.linearMemory)
// under the running guest, whose next access faults, and a fault in guest
// code or in the runtime.memmove that memory.copy calls is a fatal error of
// the process ("unexpected fault address", then "fatal error: unsafe.Slice:
// len out of range" from the runtime's traceback of the guest stack). The
// server reaches it when a guest answered at its deadline is still running
// and the executor is closed. Close must stop the call and wait for it.
func TestCloseWhileGuestRuns(t *testing.T) {
	guests := []string{"lat_copy", "lat_fill", "loop"}
	closers := []struct {
		name  string
		close func(*executor.Executor, *executor.Tool) error
	}{
		{"tool.Close", func(_ *executor.Executor, tool *executor.Tool) error { return tool.Close(context.Background()) }},
		{"executor.Close", func(e *executor.Executor, _ *executor.Tool) error { return e.Close(context.Background()) }},
	}
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for _, g := range guests {
		for _, c := range closers {
			t.Run(g+"/"+c.name, func(t *testing.T) {
				for i := 0; i < rounds; i++ {
					e := newExecutor(t)
					tool := load(t, e, g, func(m map[string]any) {
						m["limits"] = map[string]any{"memMB": 64, "cpuMs": 10000}
					})
					done := make(chan error, 1)
					go func() {
						_, err := invoke(t, tool, `{}`)
						done <- err
					}()
					time.Sleep(time.Duration(20+15*i) * time.Millisecond)
					start := time.Now()
					if err := c.close(e, tool); err != nil {
						t.Errorf("close: %v", err)
					}
					took := time.Since(start)
					select {
					case err := <-done:
						t.Logf("close took %v; the call returned %v", took, err)
						if err == nil {
							t.Error("the call succeeded; a guest that never ends must be stopped")
						}
					case <-time.After(20 * time.Second):
						t.Fatal("the call did not return within 20 s of Close")
					}
				}
			})
		}
	}
}

// TestCloseWhilePoolInitialises closes a tool while its pool's refill
// goroutine is still running a pooled instance's _initialize (a guest whose
// _initialize never returns, cpuMs 10 s). The refill's instantiation must be
// cancelled with the pool, so Close returns at once; it used to wait for the
// init to run out its budget (or 30 s), and closing the runtime before the
// refill ended would unmap the memory the init still runs on.
func TestCloseWhilePoolInitialises(t *testing.T) {
	for _, closer := range []string{"tool.Close", "executor.Close"} {
		t.Run(closer, func(t *testing.T) {
			e := newExecutor(t)
			tool := load(t, e, "init_loop", withLimits(16, 10000))
			time.Sleep(100 * time.Millisecond) // the refill is inside _initialize now
			start := time.Now()
			var err error
			if closer == "tool.Close" {
				err = tool.Close(context.Background())
			} else {
				err = e.Close(context.Background())
			}
			took := time.Since(start)
			t.Logf("%s took %v: %v", closer, took, err)
			if err != nil {
				t.Errorf("close: %v", err)
			}
			if took > 5*time.Second {
				t.Errorf("%s took %v: the pool's _initialize was not cancelled (cpuMs is 10 s)", closer, took)
			}
		})
	}
}
