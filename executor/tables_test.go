package executor_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// F05: 64 tables of 0 elements, each grown by 2 Mi elements (16 MiB of host
// memory apiece). Tables count against memMB in total, so under memMB 16
// every grow is refused (table.grow returns -1) or the call fails with
// limits-exceeded memMB, and the process does not grow past the bound.
func TestF05TableMemory(t *testing.T) {
	for _, posture := range []string{"context-isolated", "none"} {
		t.Run(posture, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(0) })
			const memMB = 16
			tool := load(t, e, "f05_table_memory", func(m map[string]any) {
				m["limits"] = map[string]any{"memMB": memMB, "cpuMs": 10000}
				m["sandbox"] = posture
			})
			var res *executor.Result
			var err error
			growth := rssProbe(t, func() {
				for i := 0; i < 3 && err == nil; i++ { // a warm instance (none) must not keep growing
					res, err = invoke(t, tool, `{}`)
				}
			})
			switch te := toolerr.As(err); {
			case err == nil:
				t.Logf("every table.grow was refused; usage %+v", res.Usage)
			case te.Code == toolerr.LimitsExceeded && te.Details["limit"] == string(toolerr.LimitMemMB):
				t.Logf("limits-exceeded: %s", te.Message)
			default:
				t.Fatalf("want success (all grows refused) or limits-exceeded memMB, got %v (details %v)", err, te.Details)
			}
			if bound := rssBound(memMB); growth > bound {
				t.Fatalf("RSS grew by %d MiB for a memMB %d tool; bound %d MiB", growth>>20, memMB, bound>>20)
			}
		})
	}
}

// A table grown during _initialize is charged to the instance (the
// initialisation's context carries its TableAccount) and stays charged for
// its calls: under memMB 16 the 8 MiB table leaves no room for 8 MiB more of
// linear memory, under memMB 32 both fit. Posture none's warm instance keeps
// the charge across calls.
func TestF05TablesShareMemMB(t *testing.T) {
	for _, posture := range []string{"context-isolated", "strict", "none"} {
		t.Run(posture, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(1) })
			for _, memMB := range []int{16, 32} {
				tool := load(t, e, "f05_init_table", func(m map[string]any) {
					m["limits"] = map[string]any{"memMB": memMB, "cpuMs": 5000}
					m["sandbox"] = posture
				})
				for i := 0; i < 3; i++ {
					res, err := invoke(t, tool, `{}`)
					if memMB == 32 {
						if err != nil && !(posture == "none" && i > 0) {
							t.Fatalf("memMB 32 call %d: %v", i, err)
						}
						continue // none: a warm instance's memory already grew
					}
					te := wantCode(t, err, toolerr.LimitsExceeded)
					if te.Details["limit"] != string(toolerr.LimitMemMB) {
						t.Fatalf("memMB 16 call %d: %v (details %v)", i, err, te.Details)
					}
					if res != nil && res.Usage.PeakMemMB < 8 {
						t.Fatalf("memMB 16 call %d: peakMemMB %v does not count the 8 MiB table", i, res.Usage.PeakMemMB)
					}
				}
			}
		})
	}
}
