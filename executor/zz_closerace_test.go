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
