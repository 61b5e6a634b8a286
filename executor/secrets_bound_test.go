package executor_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestSecretsValidationBoundedByDeadline: the declared secrets' values
// were validated against needsSpec.secrets on the default work budget,
// with no deadline and no CPU charge, before the guest: 60 secrets under
// the G01 schema's item (about 670,000 subschemas per value) took seconds
// past the call's deadline. They are now validated metered: stopped at the
// deadline, over the work budget input-validation-failed naming it.
func TestSecretsValidationBoundedByDeadline(t *testing.T) {
	e := newExecutor(t)
	item := g01Schema()["items"].(map[string]any)
	item["$defs"] = g01Schema()["$defs"]
	secrets, given := map[string]any{}, map[string]string{}
	for i := range 60 {
		name := fmt.Sprintf("S%02d", i)
		secrets[name], given[name] = item, "a-secret"
	}
	heavy := func(cpuMs int) *executor.Tool {
		return load(t, e, "echo_reactor", func(m map[string]any) {
			m["needsSpec"] = map[string]any{"secrets": secrets}
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": cpuMs}
		})
	}
	req := executor.Request{Input: []byte(`{}`), Context: executor.CallContext{Secrets: given}}
	const deadline, grace = 500 * time.Millisecond, 150 * time.Millisecond
	tool := heavy(300000)
	runtime.LockOSThread()
	clock := limits.CurrentThread()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	start, cpu0 := time.Now(), clock.Now()
	_, err := tool.Invoke(ctx, req)
	took := time.Since(start)
	if cpu := clock.Now() - cpu0; limits.Supported() && cpu < took/2 {
		took = cpu // a loaded machine: the thread's own time
	}
	cancel()
	runtime.UnlockOSThread()
	wantCode(t, err, toolerr.DeadlineExceeded)
	if took > deadline+grace {
		t.Fatalf("secrets validated for %v (deadline %v)", took, deadline)
	}
	_, err = heavy(100).Invoke(context.Background(), req)
	if te := wantCode(t, err, toolerr.InputValidationFailed); te.Details["budget"] != "validationWork" || strings.Contains(te.Message, "a-secret") {
		t.Fatalf("details %v, message %q", te.Details, te.Message)
	}
}
