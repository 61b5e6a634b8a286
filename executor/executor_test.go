package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
	"github.com/sandboxd/sandboxd/toolerr"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// fixture returns the absolute path of a built test module (skipped under
// -short when over 1 MiB: sandboxtest.FixturePath).
func fixture(t testing.TB, name string) string {
	t.Helper()
	return sandboxtest.FixturePath(t, name)
}

// manifestFor builds a manifest for a fixture; edit adjusts it.
func manifestFor(t testing.TB, name string, edit func(m map[string]any)) []byte {
	t.Helper()
	return exectest.Manifest(t, name, edit)
}

// newExecutor returns a dev-mode executor sharing the test binary's
// compilation cache (so each module compiles once per run).
func newExecutor(t testing.TB, cfg ...func(executor.Config) executor.Config) *executor.Executor {
	t.Helper()
	dev := func(c executor.Config) executor.Config { return c.WithDevMode(true).WithGuestOutput(nil, nil) }
	return exectest.Executor(t, append([]func(executor.Config) executor.Config{dev}, cfg...)...)
}

func load(t testing.TB, e *executor.Executor, name string, edit func(m map[string]any)) *executor.Tool {
	t.Helper()
	return exectest.Load(t, e, manifestFor(t, name, edit))
}

func invoke(t testing.TB, tool *executor.Tool, input string) (*executor.Result, error) {
	t.Helper()
	return tool.Invoke(context.Background(), executor.Request{Input: []byte(input), Context: executor.CallContext{TenantID: "t1", RunID: "r1"}})
}

// wantCode asserts err is a *toolerr.Error with code.
func wantCode(t testing.TB, err error, code toolerr.Code) *toolerr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	var te *toolerr.Error
	if !errors.As(err, &te) {
		t.Fatalf("want *toolerr.Error %s, got %T %v", code, err, err)
	}
	if te.Code != code || !errors.Is(err, code) {
		t.Fatalf("want code %s, got %s: %s", code, te.Code, te.Message)
	}
	return te
}

func jsonEqual(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("output = %s, want %s", gb, wb)
	}
}

func TestEchoBothStyles(t *testing.T) {
	e := newExecutor(t)
	for _, tc := range []struct {
		fixture string
		style   executor.Style
	}{
		{"echo_reactor", executor.Reactor},
		{"echo_command", executor.Command},
		{"go_echo_reactor", executor.Reactor},
		{"go_echo_command", executor.Command},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			tool := load(t, e, tc.fixture, nil)
			if tool.Style() != tc.style {
				t.Fatalf("style = %s, want %s", tool.Style(), tc.style)
			}
			res, err := invoke(t, tool, `{"message":"héllo","n":[1,2.5e3,null]}`)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, res.Output, `{"message":"héllo","n":[1,2.5e3,null]}`)
			if res.Usage.PeakMemMB <= 0 || res.Usage.WallMs <= 0 {
				t.Fatalf("usage not reported: %+v", res.Usage)
			}
		})
	}
}

func TestInputDefaultsReachGuest(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "echo_reactor", func(m map[string]any) {
		m["input"] = map[string]any{
			"type":     "object",
			"required": []string{"message"},
			"properties": map[string]any{
				"message": map[string]any{"type": "string"},
				"opts": map[string]any{
					"type":       "object",
					"default":    map[string]any{},
					"properties": map[string]any{"depth": map[string]any{"type": "integer", "default": 3}},
				},
			},
		}
	})
	res, err := invoke(t, tool, `{"message":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"message":"x","opts":{"depth":3}}`)

	_, err = invoke(t, tool, `{"opts":{"depth":"deep"}}`)
	te := wantCode(t, err, toolerr.InputValidationFailed)
	if len(te.Issues) < 2 {
		t.Fatalf("want issues for required and type, got %+v", te.Issues)
	}
	seen := map[string]bool{}
	for _, is := range te.Issues {
		seen[is.Keyword+"@"+is.InstancePath] = true
	}
	if !seen["required@"] || !seen["type@/opts/depth"] {
		t.Fatalf("issues = %+v", te.Issues)
	}
	_, err = invoke(t, tool, `{"message":`)
	wantCode(t, err, toolerr.InputValidationFailed)
}
