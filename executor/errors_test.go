package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

func TestTraps(t *testing.T) {
	e := newExecutor(t)
	for _, tc := range []struct {
		name, trap string
	}{
		{"trap", "unreachable"},
		{"oob", "out of bounds memory access"},
		{"recursion", "stack overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := load(t, e, tc.name, nil)
			_, err := invoke(t, tool, `{}`)
			te := wantCode(t, err, toolerr.HandlerTrap)
			if te.Details["trap"] != tc.trap || !strings.Contains(te.Message, tc.trap) {
				t.Fatalf("trap = %v, message %q", te.Details["trap"], te.Message)
			}
			stack, _ := te.Details["stack"].([]string)
			if len(stack) == 0 && tc.name != "recursion" { // wazero gives no stack for an overflow
				t.Fatalf("no wasm stack in %v", te.Details)
			}
			if tc.name == "trap" && len(stack) < 2 {
				t.Fatalf("want 2 frames, got %q", stack)
			}
		})
	}
}

func TestGoPanicIsTrap(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "panic_reactor", nil)
	_, err := invoke(t, tool, `{}`)
	te := wantCode(t, err, toolerr.HandlerTrap)
	if !strings.Contains(te.Message, "boom") {
		t.Fatalf("message %q does not name the panic", te.Message)
	}
}

func TestHandlerErrors(t *testing.T) {
	e := newExecutor(t)
	t.Run("declared", func(t *testing.T) {
		_, err := invoke(t, load(t, e, "declared_error", nil), `{}`)
		te := wantCode(t, err, toolerr.HandlerError)
		if te.Message != "no such item" || te.Details["handlerCode"] != "not-found" {
			t.Fatalf("error = %q %v", te.Message, te.Details)
		}
		if d, _ := te.Details["handlerDetails"].(json.RawMessage); string(d) != `{"id":7}` {
			t.Fatalf("details = %v", te.Details)
		}
	})
	t.Run("plain", func(t *testing.T) {
		_, err := invoke(t, load(t, e, "plain_error", nil), `{}`)
		te := wantCode(t, err, toolerr.HandlerError)
		if te.Message != "something broke" || te.Details["returned"] != int32(2) {
			t.Fatalf("error = %q %v", te.Message, te.Details)
		}
	})
	t.Run("command exit", func(t *testing.T) {
		_, err := invoke(t, load(t, e, "exit_error_command", nil), `{}`)
		te := wantCode(t, err, toolerr.HandlerError)
		if te.Message != "fatal: bad thing" || te.Details["exitCode"] != uint32(3) {
			t.Fatalf("error = %q %v", te.Message, te.Details)
		}
	})
}

func TestShapeInvalidAtLoad(t *testing.T) {
	e := newExecutor(t)
	for _, tc := range []struct{ name, want string }{
		{"forbidden_import", `module "env" is not allowed`},
		{"bad_signature", "input_read has signature"},
		{"unknown_function", "no_such_fn: no such function"},
		{"no_entry", "no entry point"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Load(context.Background(), manifestFor(t, tc.name, nil))
			te := wantCode(t, err, toolerr.HandlerShapeInvalid)
			if !strings.Contains(te.Message, tc.want) {
				t.Fatalf("message %q does not contain %q", te.Message, tc.want)
			}
			if te.ToolID == "" {
				t.Fatal("tool id missing")
			}
		})
	}
}

func TestOutputValidation(t *testing.T) {
	e := newExecutor(t)
	strict := func(m map[string]any) {
		m["output"] = map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}
	}
	_, err := invoke(t, load(t, e, "bad_output", strict), `{}`)
	te := wantCode(t, err, toolerr.OutputValidationFailed)
	if len(te.Issues) != 1 || te.Issues[0].Keyword != "additionalProperties" || te.Issues[0].Params["additionalProperty"] != "unexpected" {
		t.Fatalf("issues = %+v", te.Issues)
	}
	_, err = invoke(t, load(t, e, "not_json_output", strict), `{}`)
	te = wantCode(t, err, toolerr.OutputValidationFailed)
	if !strings.Contains(te.Message, "not valid JSON") {
		t.Fatalf("message %q", te.Message)
	}
}
