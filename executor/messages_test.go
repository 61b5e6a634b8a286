package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Golden texts: each situation is run and its message compared in full, so
// the wording (what went wrong and what to change) does not drift.

func TestMessageDeadline(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "loop", withLimits(64, 60_000))
	for _, tc := range []struct {
		name string
		req  executor.Request
		want string
	}{
		{"flag", executor.Request{Timeout: 150 * time.Millisecond, TimeoutSource: executor.TimeoutSource{Name: "--timeout"}},
			"the call ran past its 150ms deadline (--timeout)"},
		{"header", executor.Request{Timeout: 150 * time.Millisecond, TimeoutSource: executor.TimeoutSource{Name: "kindgi-timeout-ms", Requested: 150}},
			"the call ran past its 150ms deadline (kindgi-timeout-ms: 150)"},
		{"caller context", executor.Request{}, "the call ran past its deadline (the caller's context)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			tc.req.Input = []byte(`{}`)
			_, err := tool.Invoke(ctx, tc.req)
			te := wantCode(t, err, toolerr.DeadlineExceeded)
			if te.Message != tc.want {
				t.Fatalf("message\n got %q\nwant %q", te.Message, tc.want)
			}
		})
	}
}

// Without a deadline on the context the executor's default applies, and the
// message says so.
func TestMessageDefaultDeadline(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithDefaultTimeout(120 * time.Millisecond) })
	tool := load(t, e, "loop", withLimits(64, 60_000))
	_, err := invoke(t, tool, `{}`)
	te := wantCode(t, err, toolerr.DeadlineExceeded)
	if want := "the call ran past its 120ms deadline (the default timeout)"; te.Message != want {
		t.Fatalf("message\n got %q\nwant %q", te.Message, want)
	}
}

func TestMessageCPUBudget(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxCPUMs int64
		want     string
	}{
		{"no ceiling", 0, "the guest used its 200 ms CPU budget (limits.cpuMs); raise limits.cpuMs in the manifest (no operator ceiling --max-cpu-ms)"},
		{"ceiling", 5000, "the guest used its 200 ms CPU budget (limits.cpuMs); raise limits.cpuMs in the manifest (operator ceiling --max-cpu-ms 5000)"},
		{"at ceiling", 200, "the guest used its 200 ms CPU budget (limits.cpuMs); limits.cpuMs is already at the operator ceiling (--max-cpu-ms 200): the operator must raise it, or the handler use less"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config {
				return c.WithDefaultLimits(64, 200).WithMaxLimits(0, tc.maxCPUMs)
			})
			tool := load(t, e, "loop", withLimits(64, 200))
			_, err := invoke(t, tool, `{}`)
			te := wantCode(t, err, toolerr.LimitsExceeded)
			if te.Message != tc.want {
				t.Fatalf("message\n got %q\nwant %q", te.Message, tc.want)
			}
		})
	}
}

func TestMessageMemMB(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithMaxLimits(256, 0) })
	tool := load(t, e, "f05_init_table", withLimits(16, 5000))
	_, err := invoke(t, tool, `{}`)
	te := wantCode(t, err, toolerr.LimitsExceeded)
	if want := "handler failed (returned 2) after its memory use reached the memMB cap; raise limits.memMB in the manifest (operator ceiling --max-mem-mb 256)"; te.Message != want {
		t.Fatalf("message\n got %q\nwant %q", te.Message, want)
	}
}

func TestMessageNoOutputSet(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "f05_init_table", func(m map[string]any) {
		withLimits(32, 5000)(m)
		m["output"] = map[string]any{"type": "object"}
	})
	_, err := invoke(t, tool, `{}`)
	te := wantCode(t, err, toolerr.OutputValidationFailed)
	if want := "the handler returned 0 without calling output_set, so its output is null: output must be object"; te.Message != want {
		t.Fatalf("message\n got %q\nwant %q", te.Message, want)
	}
}

func TestDeadlineMessage(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		src  executor.TimeoutSource
		want string
	}{
		{100 * time.Millisecond, executor.TimeoutSource{Name: "--timeout"}, "the call ran past its 100ms deadline (--timeout)"},
		{50 * time.Millisecond, executor.TimeoutSource{Name: "kindgi-timeout-ms", Requested: 50}, "the call ran past its 50ms deadline (kindgi-timeout-ms: 50)"},
		{30 * time.Second, executor.TimeoutSource{}, "the call ran past its 30s deadline (the default timeout)"},
	} {
		if got := executor.DeadlineMessage(tc.d, tc.src); got != tc.want {
			t.Errorf("DeadlineMessage(%v, %+v) = %q, want %q", tc.d, tc.src, got, tc.want)
		}
	}
}
