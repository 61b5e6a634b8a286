// Package exectest builds executors, manifests and tools for the external
// test packages of executor and the packages above it. Internal tests
// (package executor) cannot import it; they use sandboxtest.
package exectest

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// Executor returns an executor that shares the test binary's compile cache
// (sandboxtest.CacheDir) and discards guest output; each with adjusts the
// Config after those defaults. It is closed when t ends.
func Executor(t testing.TB, with ...func(executor.Config) executor.Config) *executor.Executor {
	t.Helper()
	c := executor.NewConfig().WithCacheDir(sandboxtest.CacheDir(t)).WithGuestOutput(io.Discard, io.Discard)
	for _, f := range with {
		c = f(c)
	}
	e, err := executor.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// Manifest returns the JSON manifest of fixture name (testdata/wasm/NAME.wasm,
// by absolute filesystem path): id test.NAME (underscores as dashes), an
// object input, any output, 64 MiB and 5 s of CPU. edit, if not nil,
// adjusts the map before it is encoded.
func Manifest(t testing.TB, name string, edit func(m map[string]any)) []byte {
	t.Helper()
	path := sandboxtest.FixturePath(t, name)
	m := map[string]any{
		"id":              "test." + strings.ReplaceAll(name, "_", "-"),
		"description":     "fixture " + name,
		"version":         "1.0.0",
		"input":           map[string]any{"type": "object"},
		"output":          map[string]any{},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": path},
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

// Load loads manifest m into e, failing t on error; the tool is closed when
// t ends.
func Load(t testing.TB, e *executor.Executor, m []byte) *executor.Tool {
	t.Helper()
	tool, err := e.Load(context.Background(), m)
	if err != nil {
		t.Fatalf("load %s: %v", manifestID(m), err)
	}
	t.Cleanup(func() { _ = tool.Close(context.Background()) })
	return tool
}

func manifestID(m []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(m, &v) != nil || v.ID == "" {
		return "manifest"
	}
	return v.ID
}
