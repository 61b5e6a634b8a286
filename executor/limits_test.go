package executor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

func withLimits(memMB, cpuMs int) func(m map[string]any) {
	return func(m map[string]any) { m["limits"] = map[string]any{"memMB": memMB, "cpuMs": cpuMs} }
}

// The spin fixtures are stopped by the CPU budget, and the observed CPU time
// is within +25% of the declared budget.
func TestSpinStoppedByCPUBudget(t *testing.T) {
	e := newExecutor(t)
	for _, name := range []string{"loop", "spin_command"} {
		t.Run(name, func(t *testing.T) {
			tool := load(t, e, name, withLimits(64, 300))
			res, err := invoke(t, tool, `{}`)
			te := wantCode(t, err, toolerr.LimitsExceeded)
			var le *toolerr.LimitsError
			if !errors.As(err, &le) {
				t.Fatalf("no LimitsError in %v", err)
			}
			if le.Limit != toolerr.LimitCPUMs || le.Declared != 300 {
				t.Fatalf("limit = %+v", le)
			}
			if le.Observed < 300 || le.Observed > 375 {
				t.Fatalf("observed cpuMs %d, want within [300, 375]", le.Observed)
			}
			if te.Details["limit"] != "cpuMs" || te.Details["declared"] != int64(300) {
				t.Fatalf("details = %v", te.Details)
			}
			if res == nil || res.Usage.CPUMs < 300 {
				t.Fatalf("usage = %+v", res)
			}
			t.Logf("%s: observed cpuMs %d, wall %.1f ms", name, le.Observed, res.Usage.WallMs)
		})
	}
}

// Time spent blocked (here: sleeping in WASI, the way a host call blocks)
// is not CPU time: a wall deadline stops the guest, not the CPU budget.
func TestDeadlineExceeded(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "loop", withLimits(64, 60_000))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
	wantCode(t, err, toolerr.DeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline error does not match context.DeadlineExceeded: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline answered after %v", d)
	}
}

func TestCancelled(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "loop", withLimits(64, 60_000))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
	wantCode(t, err, toolerr.Cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled error does not match context.Canceled: %v", err)
	}
}

func TestMemoryBombs(t *testing.T) {
	e := newExecutor(t)
	for _, tc := range []struct {
		name  string
		memMB int
	}{
		{"membomb", 16},
		{"membomb_command", 64},
		{"huge_output_command", 16},
		{"huge_output_reactor", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := load(t, e, tc.name, withLimits(tc.memMB, 20_000))
			res, err := invoke(t, tool, `{}`)
			wantCode(t, err, toolerr.LimitsExceeded)
			var le *toolerr.LimitsError
			if !errors.As(err, &le) || le.Limit != toolerr.LimitMemMB || le.Declared != int64(tc.memMB) || le.Observed <= int64(tc.memMB)-1 {
				t.Fatalf("limit = %+v (%v)", le, err)
			}
			if res == nil || res.Usage.PeakMemMB > float64(tc.memMB) || res.Usage.PeakMemMB < float64(tc.memMB)/2 {
				t.Fatalf("peak memory %+v, want within (memMB/2, memMB]", res)
			}
			t.Logf("%s: peakMemMB %.2f, observed %d MB, %s", tc.name, res.Usage.PeakMemMB, le.Observed, err)
		})
	}
}

func TestDeclaredMinimumMemoryRefusedAtLoad(t *testing.T) {
	e := newExecutor(t)
	_, err := e.Load(context.Background(), manifestFor(t, "big_min_memory", withLimits(64, 1000)))
	wantCode(t, err, toolerr.LimitsExceeded)
	var le *toolerr.LimitsError
	if !errors.As(err, &le) || le.Limit != toolerr.LimitMemMB || le.Observed != 125 {
		t.Fatalf("limit = %+v", le)
	}
	// With room for it, the same module loads.
	load(t, e, "big_min_memory", withLimits(200, 1000))
}

// A memMB no wasm32 guest can have is the manifest's mistake
// (invalid-tool-definition, saying what to declare), not a level this
// sandboxd lacks (issue 27 §3).
func TestMemMBOverWasm32IsInvalidDefinition(t *testing.T) {
	e := newExecutor(t)
	_, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", withLimits(8192, 1000)))
	te := wantCode(t, err, toolerr.InvalidToolDefinition)
	if want := "limits.memMB 8192 is over the wasm32 maximum of 4096 MB: declare 4096 or less"; te.Message != want {
		t.Errorf("message %q, want %q", te.Message, want)
	}
	if te.Details["max"] != 4096 {
		t.Errorf("details %v", te.Details)
	}
}
