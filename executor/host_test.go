package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// context_read carries the call context with declared env only.
func TestContextRead(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "context", func(m map[string]any) {
		m["needsSpec"] = map[string]any{"env": map[string]any{"REGION": map[string]any{"type": "string", "minLength": 2}}}
	})
	cc := executor.CallContext{
		TenantID: "t1", RunID: "r1", RequestID: "q1", OrgID: "o1",
		Settings: json.RawMessage(`{"mode":"fast"}`),
		Env:      map[string]string{"REGION": "eu", "UNDECLARED": "leak"},
		Secrets:  map[string]string{"TOKEN": "s3cret"},
	}
	res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`), Context: cc})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"tenantId":"t1","runId":"r1","requestId":"q1","orgId":"o1","settings":{"mode":"fast"},"env":{"REGION":"eu"}}`)

	// A declared env value that is missing or invalid fails before the guest runs.
	cc.Env = map[string]string{"REGION": "x"}
	_, err = tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`), Context: cc})
	te := wantCode(t, err, toolerr.InputValidationFailed)
	if len(te.Issues) != 1 || te.Issues[0].InstancePath != "/ctx/env/REGION" || te.Issues[0].Keyword != "minLength" {
		t.Fatalf("issues = %+v", te.Issues)
	}
	cc.Env = nil
	_, err = tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`), Context: cc})
	te = wantCode(t, err, toolerr.InputValidationFailed)
	if te.Issues[0].Keyword != "required" || te.Issues[0].Params["missingProperty"] != "REGION" {
		t.Fatalf("issues = %+v", te.Issues)
	}
}

func TestGuestLogs(t *testing.T) {
	var mu sync.Mutex
	var got []executor.LogRecord
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithLogSink(func(r executor.LogRecord) { mu.Lock(); got = append(got, r); mu.Unlock() })
	})
	if _, err := invoke(t, load(t, e, "logger", nil), `{}`); err != nil {
		t.Fatal(err)
	}
	want := []executor.LogRecord{
		{"test.logger", 0, "debug line"}, {"test.logger", 1, "info line"},
		{"test.logger", 2, "warn line"}, {"test.logger", 3, "error line"},
	}
	if len(got) != len(want) {
		t.Fatalf("logs = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("log %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// table.grow cannot allocate past memMB: tables are capped at memMB/8
// elements, so with memMB 64 exactly 7 grows of 1 Mi elements succeed.
func TestTableBombCapped(t *testing.T) {
	e := newExecutor(t)
	_, err := invoke(t, load(t, e, "table_bomb", withLimits(64, 5000)), `{}`)
	te := wantCode(t, err, toolerr.HandlerError)
	if te.Details["returned"] != int32(7) {
		t.Fatalf("details = %v", te.Details)
	}
}

// _initialize runs under the CPU budget too.
func TestInitializeLoopStopped(t *testing.T) {
	e := newExecutor(t)
	_, err := invoke(t, load(t, e, "init_loop", withLimits(16, 100)), `{}`)
	wantCode(t, err, toolerr.LimitsExceeded)
	var le *toolerr.LimitsError
	if !errors.As(err, &le) || le.Limit != toolerr.LimitCPUMs || le.Observed < 100 {
		t.Fatalf("limit = %+v", le)
	}
}

// A none-posture instance that failed is discarded: the next call starts
// from a fresh instance.
func TestNonePostureDiscardsFailedInstance(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "counter_trap", posture("none"))
	for i, want := range []string{`{"count":1}`, `{"count":2}`} {
		res, err := invoke(t, tool, `{}`)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		jsonEqual(t, res.Output, want)
	}
	_, err := invoke(t, tool, `{"trap":true}`)
	wantCode(t, err, toolerr.HandlerTrap)
	res, err := invoke(t, tool, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"count":1}`)
}

// WASI calls whose host work grows with a count the guest passes are
// refused over a cap (a trap naming it) before wazero walks guest memory:
// poll_oneoff subscriptions, fd_write iovecs.
func TestWASICountCaps(t *testing.T) {
	e := newExecutor(t)
	for fx, want := range map[string]string{
		"lat_poll_many": "poll_oneoff with 16777216 subscriptions is over the cap of 4096",
		"lat_iovecs":    "fd_write with 1048576 iovecs is over the cap of 1024",
	} {
		_, err := invoke(t, load(t, e, fx, withLimits(16, 5_000)), `{}`)
		te := wantCode(t, err, toolerr.HandlerTrap)
		if !strings.Contains(te.Message, want) || te.Details["trap"] != want {
			t.Errorf("%s: %q %v, want the trap %q", fx, te.Message, te.Details, want)
		}
	}
}
