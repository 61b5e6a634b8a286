package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestG01ValidationBoundedByDeadline: a 201-byte input against the
// reproducer's schema took 25-32 s with a 1 s deadline, and a 21-byte
// output came back as a result after 3.3 s with usage.cpuMs 0.011. Now
// both end at the deadline (deadline-exceeded, no output), the input over
// its work budget is input-validation-failed naming it, and the output
// validation counts against cpuMs (limits-exceeded) and is charged to
// usage.cpuMs.
func TestG01ValidationBoundedByDeadline(t *testing.T) {
	e := newExecutor(t)
	input := sandboxtest.Zeros(100) // 201 bytes
	output := sandboxtest.Zeros(10) // 21 bytes
	const deadline = 500 * time.Millisecond
	const grace = 100 * time.Millisecond
	// invoke returns the call's wall time, or its thread's CPU time when
	// the machine is so loaded that the thread ran less than half of it.
	invoke := func(tool *executor.Tool, req executor.Request, d time.Duration) (res *executor.Result, took time.Duration, err error) {
		took = sandboxtest.Timed(func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			res, err = tool.Invoke(ctx, req)
		})
		return res, took, err
	}
	call := func(tool *executor.Tool, input string, d time.Duration) (*executor.Result, time.Duration, error) {
		return invoke(tool, executor.Request{Input: []byte(input)}, d)
	}
	heavyIn := func(cpuMs int) *executor.Tool {
		return load(t, e, "echo_reactor", func(m map[string]any) {
			m["input"] = sandboxtest.G01Schema()
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": cpuMs}
		})
	}
	heavyOut := func(cpuMs int) *executor.Tool {
		return load(t, e, "echo_reactor", func(m map[string]any) {
			m["input"] = map[string]any{"type": "array"}
			m["output"] = sandboxtest.G01Schema()
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": cpuMs}
		})
	}

	t.Run("input-deadline", func(t *testing.T) {
		res, took, err := call(heavyIn(300000), input, deadline)
		wantCode(t, err, toolerr.DeadlineExceeded)
		if res != nil || took > deadline+grace {
			t.Fatalf("result %v after %v (deadline %v)", res, took, deadline)
		}
	})
	// A caller's cancellation during the validation says what a cancelled
	// guest run says (it said "invocation cancelled: context canceled").
	t.Run("input-cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := heavyIn(300000).Invoke(ctx, executor.Request{Input: []byte(input)})
		te := wantCode(t, err, toolerr.Cancelled)
		if !strings.HasPrefix(te.Message, "the call was cancelled") {
			t.Fatalf("message %q, want the call was cancelled…", te.Message)
		}
	})
	t.Run("input-budget", func(t *testing.T) {
		_, took, err := call(heavyIn(100), input, time.Minute)
		te := wantCode(t, err, toolerr.InputValidationFailed)
		if te.Details["budget"] != "validationWork" || te.Details["raise"] != "limits.cpuMs" {
			t.Fatalf("details %v", te.Details)
		}
		t.Logf("refused after %v: %s", took, te.Message)
	})
	t.Run("output-deadline", func(t *testing.T) {
		res, took, err := call(heavyOut(300000), output, deadline)
		wantCode(t, err, toolerr.DeadlineExceeded)
		if took > deadline+grace || (res != nil && res.Output != nil) {
			t.Fatalf("output %s after %v (deadline %v): %v %+v", res.Output, took, deadline, err, res)
		}
		if res == nil || res.Usage.CPUMs < 50 {
			t.Fatalf("validation CPU not charged: %+v", res)
		}
	})
	t.Run("output-cpuMs", func(t *testing.T) {
		res, took, err := call(heavyOut(100), output, time.Minute)
		te := wantCode(t, err, toolerr.LimitsExceeded)
		if te.Details["limit"] != "cpuMs" || res == nil || res.Output != nil || res.Usage.CPUMs < 100 {
			t.Fatalf("details %v, result %+v", te.Details, res)
		}
		t.Logf("stopped after %v, usage.cpuMs %v", took, res.Usage.CPUMs)
	})
	t.Run("needs-config", func(t *testing.T) {
		heavyCfg := func(cpuMs int) *executor.Tool {
			return load(t, e, "echo_reactor", func(m map[string]any) {
				m["needsSpec"] = map[string]any{"config": map[string]any{"C": sandboxtest.G01Schema()}}
				m["limits"] = map[string]any{"memMB": 16, "cpuMs": cpuMs}
			})
		}
		req := executor.Request{Input: []byte(`{}`), Context: executor.CallContext{Config: map[string]json.RawMessage{"C": json.RawMessage(input)}}}
		_, took, err := invoke(heavyCfg(300000), req, deadline)
		wantCode(t, err, toolerr.DeadlineExceeded)
		if took > deadline+grace {
			t.Fatalf("config validation took %v (deadline %v)", took, deadline)
		}
		_, err = heavyCfg(100).Invoke(context.Background(), req)
		if te := wantCode(t, err, toolerr.InputValidationFailed); te.Details["budget"] != "validationWork" {
			t.Fatalf("details %v", te.Details)
		}
	})
	t.Run("ordinary", func(t *testing.T) {
		tool := load(t, e, "echo_reactor", func(m map[string]any) {
			m["input"] = map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}
			m["output"] = map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": 100}
		})
		big := sandboxtest.Zeros(10000)
		res, _, err := call(tool, big, time.Minute)
		if err != nil || len(res.Output) != len(big) {
			t.Fatalf("10,000 items: %v", err)
		}
	})
}

// Decoding a document before its validation is stopped by the call's
// deadline too (issue 24): a 64 MiB input string of non-ASCII text (the
// decoder's slowest run, 0.3-1 s here) under a 20 ms deadline is answered
// deadline-exceeded within the grace, for the fast-path schema shape and
// for the full path.
func TestG01DecodingBoundedByDeadline(t *testing.T) {
	e := newExecutor(t)
	input := []byte(`{"data":"` + strings.Repeat("é", 32<<20) + `"}`)
	const deadline = 20 * time.Millisecond
	const grace = 100 * time.Millisecond
	for name, prop := range map[string]map[string]any{
		"fast path": {"type": "string"},
		"full path": {"type": "string", "minLength": 1},
	} {
		tool := load(t, e, "echo_reactor", func(m map[string]any) {
			m["input"] = map[string]any{"type": "object", "properties": map[string]any{"data": prop}, "required": []any{"data"}}
			m["limits"] = map[string]any{"memMB": 512, "cpuMs": 300000}
		})
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		_, err := tool.Invoke(ctx, executor.Request{Input: input})
		took := time.Since(start)
		cancel()
		wantCode(t, err, toolerr.DeadlineExceeded)
		t.Logf("%s: answered %v after the start (deadline %v)", name, took, deadline)
		if took > deadline+grace {
			t.Errorf("%s: answered %v after the start, want within %v of the %v deadline", name, took, grace, deadline)
		}
	}
}
