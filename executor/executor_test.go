package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// fixture returns the absolute path of a built test module.
func fixture(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "testdata", "wasm", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("fixture %s: %v (run make wasm)", name, err)
	}
	skipShortGoGuest(t, name, fi.Size())
	return p
}

// skipShortGoGuest skips t under -short when the fixture is a multi-MB
// standard-Go guest: compiling one takes seconds, so these tests run only in
// the full (CI) run. Every fixture is loaded through fixture, so this is the
// one place -short decides it.
func skipShortGoGuest(t testing.TB, name string, size int64) {
	t.Helper()
	if testing.Short() && size > 1<<20 {
		t.Skip("-short: loads a guest over 1 MiB (" + name + ", a standard-Go build or the like); compiling it takes seconds")
	}
}

// manifestFor builds a manifest for a fixture; edit adjusts it.
func manifestFor(t testing.TB, name string, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"id":              "test." + strings.ReplaceAll(name, "_", "-"),
		"description":     "fixture " + name,
		"version":         "1.0.0",
		"input":           map[string]any{"type": "object"},
		"output":          map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": fixture(t, name)},
		"limits":          map[string]any{"memMB": 64, "cpuMs": 5000},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var sharedCache = struct {
	once sync.Once
	dir  string
}{}

// newExecutor returns a dev-mode executor sharing one on-disk compilation
// cache across the package's tests (so each module compiles once per run).
func newExecutor(t testing.TB, cfg ...func(executor.Config) executor.Config) *executor.Executor {
	t.Helper()
	sharedCache.once.Do(func() {
		d, err := os.MkdirTemp("", "sandboxd-test-cache-")
		if err != nil {
			panic(err)
		}
		sharedCache.dir = d
	})
	c := executor.NewConfig().WithDevMode(true).WithCacheDir(sharedCache.dir).WithGuestOutput(nil, nil)
	for _, f := range cfg {
		c = f(c)
	}
	e, err := executor.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCache.dir != "" {
		os.RemoveAll(sharedCache.dir)
	}
	os.Exit(code)
}

func load(t testing.TB, e *executor.Executor, name string, edit func(m map[string]any)) *executor.Tool {
	t.Helper()
	tool, err := e.Load(context.Background(), manifestFor(t, name, edit))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	t.Cleanup(func() { _ = tool.Close(context.Background()) })
	return tool
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
