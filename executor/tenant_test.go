package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// callAs invokes tool for tenant with input and the given call context
// fields (env, config, secrets may be nil).
func callAs(t testing.TB, tool *executor.Tool, tenant, input string, cc executor.CallContext) (*executor.Result, error) {
	t.Helper()
	cc.TenantID, cc.RunID = tenant, "r-"+tenant
	return tool.Invoke(context.Background(), executor.Request{Input: []byte(input), Context: cc})
}

// F02: a module the fuel pass found NOT resettable (it uses table.set)
// exports its own mutable global named sandboxd.dirty. Recycling is decided
// by the pass's verdict kept with the compiled module, so the instance is
// never reset and reused: tenant B never sees tenant A's input, and every
// call is the first its instance serves.
func TestF02DirtyExportRecycle(t *testing.T) {
	for _, size := range []int{1, 0, 8} { // pool size 1 as in the finding; none; the default
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(size) })
		tool := load(t, e, "f02_dirty_export", func(m map[string]any) {
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": 500}
		})
		for i, c := range []struct{ tenant, input string }{
			{"tenantA", `{"pw":"SECRET-A1"}`},
			{"tenantB", `{}`},
			{"tenantA", `{"pw":"hunter2!"}`},
			{"tenantB", `{}`},
			{"tenantB", `{}`},
		} {
			res, err := callAs(t, tool, c.tenant, c.input, executor.CallContext{})
			if err != nil {
				t.Fatalf("pool %d call %d: %v", size, i, err)
			}
			var out struct {
				Calls int    `json:"calls"`
				Prev  string `json:"prev"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("pool %d call %d: output %s: %v", size, i, res.Output, err)
			}
			if out.Calls != 0 || out.Prev != "........" {
				t.Fatalf("pool %d call %d (%s): %s — the instance carried state from an earlier call", size, i, c.tenant, res.Output)
			}
			if strings.Contains(string(res.Output), "SECRET") || strings.Contains(string(res.Output), "hunter") {
				t.Fatalf("pool %d call %d: tenant A's input leaked: %s", size, i, res.Output)
			}
		}
		if n := tool.RecycledCalls(); n != 0 {
			t.Fatalf("pool %d: %d calls were served by a recycled instance of a non-resettable module", size, n)
		}
	}
}
