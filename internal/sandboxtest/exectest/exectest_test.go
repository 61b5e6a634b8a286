package exectest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// A fixture's manifest, edited, loads into a dev-mode executor and runs.
func TestExecutorManifestLoad(t *testing.T) {
	e := exectest.Executor(t, func(c executor.Config) executor.Config { return c.WithDevMode(true) })
	m := exectest.Manifest(t, "counter", func(m map[string]any) { m["version"] = "2.0.0" })
	var v map[string]any
	if err := json.Unmarshal(m, &v); err != nil || v["id"] != "test.counter" || v["version"] != "2.0.0" {
		t.Fatalf("manifest %s: %v", m, err)
	}
	tool := exectest.Load(t, e, m)
	res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)})
	if err != nil || string(res.Output) != `{"count":1}` {
		t.Fatalf("invoke: %v %+v", err, res)
	}
}
