package pack_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

// indexPack writes a Kindgi-built pack: index.json naming source paths, a
// module root with the Wasm modules under other names, and the bundle map
// from one to the other. edit may change the index before it is written.
func indexPack(t testing.TB, edit func(ix map[string]any)) pack.IndexSource {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "dist")
	writeFile(t, filepath.Join(root, "tools", "echo", "index.wasm"), echoWasm(t))
	writeFile(t, filepath.Join(root, "checks", "all.wasm"), checksWasm(t))
	writeFile(t, filepath.Join(root, "bundle-map.json"), []byte(`{
  "tools/echo/index.ts": "tools/echo/index.mjs",
  "guardrails/min-length/index.ts": "checks/all.wasm",
  "guardrails/no-verdict/index.ts": "tools/echo/index.wasm#default"
}`))
	minLen := map[string]any{"type": "object", "required": []string{"minLength"}, "additionalProperties": false,
		"properties": map[string]any{"minLength": map[string]any{"type": "integer", "minimum": 0}, "mode": map[string]any{"type": "string", "default": "plain"}}}
	ix := map[string]any{
		"v": 1, "packId": "acme.ledger", "packVersion": "1.2.0", "artifactVersion": "20261201.1",
		"publishedAt": "2026-12-01T10:00:00.000Z", "agents": []any{}, "flows": []any{},
		"tools": []any{map[string]any{
			"id": "acme.echo", "version": "1.0.0", "modulePath": "tools/echo/index.ts",
			"input": map[string]any{"type": "object"}, "output": map[string]any{"type": "object"},
		}},
		"guardrails": []any{
			map[string]any{"id": "acme.ledger.response-not-empty", "kind": "zero-llm", "action": map[string]any{"on-violation": "halt"},
				"checkModulePath": "guardrails/min-length/index.ts", "checkId": "acme.ledger.checks.response-not-empty",
				"configSchema": minLen, "config": map[string]any{"minLength": 1},
				"limits": map[string]any{"memMB": 64, "cpuMs": 2000}, "sandbox": "strict", "network": map[string]any{"kind": "none"}},
			map[string]any{"id": "acme.ledger.no-verdict", "kind": "zero-llm", "action": map[string]any{"on-violation": "log-only"},
				"checkModulePath": "guardrails/no-verdict/index.ts"},
		},
	}
	if edit != nil {
		edit(ix)
	}
	writeJSON(t, filepath.Join(dir, "index.json"), ix)
	bm, err := pack.ReadBundleMap(filepath.Join(root, "bundle-map.json"))
	if err != nil {
		t.Fatal(err)
	}
	return pack.IndexSource{Index: filepath.Join(dir, "index.json"), ModuleRoot: root, BundleMap: bm}
}

func TestIndexToolsAndChecks(t *testing.T) {
	src := indexPack(t, nil)
	p, problems := src.Read()
	if p == nil || len(problems) > 0 {
		t.Fatalf("Read: %v", problems)
	}
	if p.ID != "acme.ledger" || p.ArtifactVersion != "20261201.1" || p.Layout != pack.LayoutIndex {
		t.Errorf("pack = %+v", p)
	}
	if len(p.Tools) != 1 || p.Tools[0].ID != "acme.echo" || p.Tools[0].Version != "1.0.0" || p.Tools[0].Module == nil {
		t.Fatalf("tools = %+v", p.Tools)
	}
	var ids []string
	for _, c := range p.Checks {
		ids = append(ids, c.ID+"<"+c.Guardrail)
	}
	// checkId when given, else the guardrail's id; sorted.
	if got := strings.Join(ids, " "); got != "acme.ledger.checks.response-not-empty<acme.ledger.response-not-empty acme.ledger.no-verdict<acme.ledger.no-verdict" {
		t.Errorf("checks = %s", got)
	}
	// The synthesized manifest carries the guardrail's posture, limits and network.
	var m map[string]any
	_ = json.Unmarshal(p.Checks[0].Manifest, &m)
	if m["sandbox"] != "strict" || m["limits"].(map[string]any)["memMB"] != float64(64) || m["network"].(map[string]any)["kind"] != "none" {
		t.Errorf("manifest = %s", p.Checks[0].Manifest)
	}
	if err := p.Checks[0].ValidateConfig(); err != nil {
		t.Errorf("the declared config is valid: %v", err)
	}
}

func TestIndexCheckRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiles checks_reactor, a multi-MB standard-Go guest (seconds)")
	}
	p, problems := indexPack(t, nil).Read()
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	exec := exectest.Executor(t)
	ctx := context.Background()
	load := func(c pack.Check) *executor.Tool {
		tool, err := exec.Load(ctx, c.Manifest, executor.WithModule(c.Module))
		if err != nil {
			t.Fatalf("load %s: %v", c.ID, err)
		}
		t.Cleanup(func() { tool.Close(ctx) })
		return tool
	}
	start := time.Now()
	minLen, noVerdict := p.Checks[0], p.Checks[1]
	tool := load(minLen)
	t.Logf("loading the %d-byte Go check module took %v", len(minLen.Module), time.Since(start))
	trace := json.RawMessage(`{"runId":"r1","tenantId":"t1","output":"Recorded.","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"}`)
	call := func(c pack.Check, tool *executor.Tool, config string, timeout time.Duration) (string, error) {
		in, err := c.Input(json.RawMessage(config), trace)
		if err != nil {
			return "", err
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		res, err := tool.Invoke(cctx, executor.Request{Input: in, Context: executor.CallContext{TenantID: "t1", RunID: "r1"}})
		if err != nil {
			return "", err
		}
		return string(res.Output), nil
	}
	for _, tc := range []struct {
		name, config, want string
		code               toolerr.Code
		msg                string
	}{
		{name: "passes", config: `{"minLength":1}`, want: `{"passed":true,"reason":"long enough"}`},
		{name: "fails", config: `{"minLength":50}`, want: `{"passed":false,"reason":"output shorter than minLength","attributes":{"length":9}}`},
		{name: "config missing a property", config: `{}`, code: toolerr.InputValidationFailed,
			msg: `Check "acme.ledger.checks.response-not-empty" config failed validation at /: must have required property 'minLength'`},
		{name: "config of the wrong type", config: `{"minLength":"one"}`, code: toolerr.InputValidationFailed,
			msg: `Check "acme.ledger.checks.response-not-empty" config failed validation at /minLength: must be integer`},
		{name: "config not an object", config: `[1]`, code: toolerr.InputValidationFailed, msg: "must be object"},
		{name: "handler error", config: `{"minLength":1,"mode":"throw"}`, code: toolerr.HandlerError, msg: "the check gave up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := call(minLen, tool, tc.config, 30*time.Second)
			if tc.code == "" {
				if err != nil || out != tc.want {
					t.Fatalf("got %s, %v; want %s", out, err, tc.want)
				}
				return
			}
			te := toolerr.As(err)
			if err == nil || te.Code != tc.code || !strings.Contains(te.Message, tc.msg) {
				t.Fatalf("got %s, %v; want %s containing %q", out, err, tc.code, tc.msg)
			}
			if tc.code == toolerr.InputValidationFailed && len(te.Issues) == 0 {
				t.Errorf("no Ajv issues: %+v", te)
			}
		})
	}
	t.Run("config defaults are not filled", func(t *testing.T) {
		in, err := minLen.Input(json.RawMessage(`{"minLength":1}`), trace)
		if err != nil || strings.Contains(string(in), "plain") {
			t.Fatalf("Input = %s, %v; the schema's default must not be filled", in, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		_, err := call(minLen, tool, `{"minLength":1,"mode":"spin"}`, 300*time.Millisecond)
		if !errors.Is(err, toolerr.DeadlineExceeded) && !errors.Is(err, toolerr.LimitsExceeded) {
			t.Fatalf("a spinning check: %v; want deadline-exceeded or limits-exceeded", err)
		}
		t.Logf("a spinning check stopped after %v: %v", time.Since(start), toolerr.As(err).Code)
	})
	t.Run("a result without passed", func(t *testing.T) {
		// The echo module answers its input, {"config","trace"}: no verdict.
		out, err := call(noVerdict, load(noVerdict), `{}`, 30*time.Second)
		te := toolerr.As(err)
		if err == nil || te.Code != toolerr.OutputValidationFailed || !strings.Contains(te.Message, "passed") {
			t.Fatalf("got %s, %v; want output-validation-failed naming passed", out, err)
		}
		if te.Issues[0].Keyword != "required" || te.Issues[0].Params["missingProperty"] != "passed" {
			t.Errorf("issues = %+v", te.Issues)
		}
	})
}

func TestIndexProblems(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(ix map[string]any)
		source bool // the index itself is refused
		want   string
	}{
		{name: "missing check module", edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[0].(map[string]any)["checkModulePath"] = "guardrails/gone.ts"
		}, want: "acme.ledger.checks.response-not-empty: module not loadable"},
		{name: "check module escapes the root", edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[0].(map[string]any)["checkModulePath"] = "../index.json"
		}, want: "inside the module root"},
		{name: "configSchema does not compile", edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[0].(map[string]any)["configSchema"] = map[string]any{"type": "nonsense"}
		}, want: "configSchema"},
		{name: "duplicate check id", edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[1].(map[string]any)["checkId"] = "acme.ledger.checks.response-not-empty"
		}, want: "duplicate check id"},
		{name: "bad posture", edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[1].(map[string]any)["limits"] = map[string]any{"memMB": 0, "cpuMs": 1}
		}, want: "its check cannot be a tool"},
		{name: "unknown guardrail field", source: true, edit: func(ix map[string]any) {
			ix["guardrails"].([]any)[1].(map[string]any)["check"] = "x"
		}, want: `unknown field "check"`},
		{name: "guardrail without checkModulePath", edit: func(ix map[string]any) {
			delete(ix["guardrails"].([]any)[1].(map[string]any), "checkModulePath")
		}, want: "acme.ledger.no-verdict: modulePath \"\" must be a relative"},
		{name: "envelope v2", source: true, edit: func(ix map[string]any) { ix["v"] = 2 }, want: "v must be 1"},
		{name: "no packId", source: true, edit: func(ix map[string]any) { delete(ix, "packId") }, want: "non-empty packId"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, problems := indexPack(t, tc.edit).Read()
			if (p == nil) != tc.source {
				t.Fatalf("pack = %v, problems = %v; want source problem %v", p, problems, tc.source)
			}
			var all []string
			for _, pr := range problems {
				all = append(all, pr.String())
			}
			if got := strings.Join(all, "\n"); len(problems) == 0 || !strings.Contains(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

func TestIndexUnreadable(t *testing.T) {
	src := indexPack(t, nil)
	src.ModuleRoot = filepath.Join(t.TempDir(), "absent")
	if p, problems := src.Read(); p != nil || len(problems) != 1 || !strings.Contains(problems[0].Message, "module root") {
		t.Fatalf("%v %v", p, problems)
	}
	src = indexPack(t, nil)
	_ = os.WriteFile(src.Index, []byte("{"), 0o644)
	if p, problems := src.Read(); p != nil || len(problems) != 1 {
		t.Fatalf("%v %v", p, problems)
	}
}

func TestValidateIndex(t *testing.T) {
	src := indexPack(t, nil)
	b, _ := os.ReadFile(src.Index)
	if lines, err := pack.ValidateIndex(b); err != nil || lines != nil {
		t.Fatalf("a valid index: %v %v", lines, err)
	}
	src = indexPack(t, func(ix map[string]any) {
		ix["publishedAt"] = "yesterday"
		ix["env"] = map[string]any{"required": []string{"KINDGI_TOKEN"}, "optional": []string{}}
		delete(ix, "flows")
	})
	b, _ = os.ReadFile(src.Index)
	lines, err := pack.ValidateIndex(b)
	got := strings.Join(lines, "\n")
	for _, want := range []string{"/publishedAt", "/env/required/0", "missing property 'flows'"} {
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("ValidateIndex: %v\n%s\nwant a line with %q", err, got, want)
		}
	}
	// The index still reads: a pack service is lenient where the schema is not.
	if p, problems := src.Read(); p == nil || len(problems) > 0 {
		t.Errorf("Read: %v", problems)
	}
}
