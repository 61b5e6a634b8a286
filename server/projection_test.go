package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestProjectionValidationBoundedByDeadline: the envelope's projection
// validates the input again (Outcome.Envelope); that validation ran on the
// default work budget with no deadline, seconds of CPU after a call
// answered deadline-exceeded. It now stops at the call's deadline.
func TestProjectionValidationBoundedByDeadline(t *testing.T) {
	projected := tool(t, "t.projected", "echo_reactor", 16, 300000, map[string]any{
		"input":    sandboxtest.G01Schema(),
		"metadata": map[string]any{"x.ai/tool": map[string]any{"kind": "read", "input": map[string]any{"first": "/0"}}},
	})
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{projected}}, server.Options{})
	input := sandboxtest.Zeros(100)
	const deadline = 300 * time.Millisecond
	now := time.Now()
	o := ts.Call(context.Background(), server.Call{Tool: "t.projected", Input: []byte(input), Start: now, Deadline: now.Add(deadline)})
	if o.Err == nil || o.Err.Code != toolerr.DeadlineExceeded {
		t.Fatalf("outcome %+v, want deadline-exceeded", o)
	}
	t0 := time.Now()
	env, ok := o.Envelope()
	took := time.Since(t0)
	if !ok {
		t.Fatal("no envelope")
	}
	if took > time.Second {
		t.Fatalf("Envelope took %v after a %v deadline: its validation is not stopped there", took, deadline)
	}
	t.Logf("Envelope after the deadline: %v, input %v", took, env.Input)
}

// TestCheckConfigValidationBoundedByDeadline: a check-invoke's config
// (sent by the caller) was validated against the check's configSchema on
// the default work budget with no deadline, before admission. It now
// stops at the call's deadline (deadline-exceeded).
func TestCheckConfigValidationBoundedByDeadline(t *testing.T) {
	x := sandboxtest.G01Schema()
	cfgSchema := map[string]any{"type": "object", "properties": map[string]any{"x": x}, "$defs": x["$defs"]}
	delete(x, "$defs")
	guardrails := []any{map[string]any{"id": "acme.heavy", "kind": "zero-llm", "action": map[string]any{"on-violation": "log-only"},
		"checkModulePath": "echo.wasm", "configSchema": cfgSchema,
		"limits": map[string]any{"memMB": 16, "cpuMs": 300000}}}
	index, root := writeIndex(t, []map[string]any{indexTool("acme.echo", "echo.wasm")},
		map[string]any{"required": []string{}, "optional": []string{}, "guardrails": guardrails},
		map[string][]byte{"echo.wasm": examples.EchoWasm})
	ts := start(t, server.IndexSource{Index: index, ModuleRoot: root}, server.Options{})
	config := `{"x":` + sandboxtest.Zeros(100) + "}"
	const deadline = 300 * time.Millisecond
	now := time.Now()
	o := ts.Call(context.Background(), server.Call{Tool: "acme.heavy", Check: true, Config: []byte(config), Trace: []byte(`{}`), Start: now, Deadline: now.Add(deadline)})
	took := time.Since(now)
	if o.Err == nil || o.Err.Code != toolerr.DeadlineExceeded {
		t.Fatalf("outcome %+v, want deadline-exceeded", o.Err)
	}
	if took > deadline+time.Second {
		t.Fatalf("answered after %v (deadline %v): the config's validation is not stopped there", took, deadline)
	}
	t.Logf("answered after %v: %s", took, o.Err.Message)
}
