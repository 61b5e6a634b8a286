package executor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// An Extism string input is unquoted and copied into kernel memory inside
// the call's guard (issue 24), charged a chunk at a time: a 128 MiB input
// string to a plug-in that returns at once (var_too_big: handler-error)
// ends limits-exceeded cpuMs within stopBound of cpuMs 20, and usage.cpuMs
// holds that work. Before, the unquoting and copy ran before the guard,
// uncharged and uninterruptible, and the call ended with the guest's
// handler-error.
func TestExtismInputUnquoteBounded(t *testing.T) {
	e := newExecutor(t)
	g := latGuest{name: "Extism 128 MiB string input", fx: "g04_extism_kernel", entry: "var_too_big", memMB: 512,
		edit: func(m map[string]any) { m["input"] = map[string]any{"type": "string"} }}
	const cpuMs = 20
	tool := latLoad(t, e, g, cpuMs)
	input := []byte(`"` + strings.Repeat("a", 64<<20) + strings.Repeat(`\n`, 32<<20) + `"`)
	for range 2 {
		res, err := tool.Invoke(context.Background(), executor.Request{Input: input})
		te := wantCode(t, err, toolerr.LimitsExceeded)
		if te.Details["limit"] != "cpuMs" || res == nil {
			t.Fatalf("want limits-exceeded cpuMs with usage: %s %v %+v", te.Message, te.Details, res)
		}
		obs, _ := te.Details["observed"].(int64)
		t.Logf("stopped with %v ms of the guard's CPU (cpuMs %d); usage.cpuMs %.1f", te.Details["observed"], cpuMs, res.Usage.CPUMs)
		if obs > cpuMs+stopBound {
			t.Errorf("stopped %d ms into the call's CPU, want within %d ms of cpuMs %d", obs, stopBound, cpuMs)
		}
		if res.Usage.CPUMs < cpuMs {
			t.Errorf("usage.cpuMs %.1f: the input's work is not charged", res.Usage.CPUMs)
		}
	}
}
