package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/server"
)

// writeIndex lays out a pack: index.json plus modules under root.
func writeIndex(t *testing.T, tools []map[string]any, env map[string]any, modules map[string][]byte) (index, root string) {
	t.Helper()
	root = t.TempDir()
	for p, b := range modules {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := map[string]any{
		"v": 1, "packId": "acme", "packVersion": "2.0.0", "artifactVersion": "20260920.1",
		"publishedAt": "2026-09-20T14:32:07.104Z", "tools": tools,
		"guardrails": []any{}, "agents": []any{}, "flows": []any{},
	}
	if guardrails, ok := env["guardrails"]; ok {
		doc["guardrails"] = guardrails
		delete(env, "guardrails")
	}
	if env != nil {
		doc["env"] = env
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	index = filepath.Join(t.TempDir(), "index.json")
	if err := os.WriteFile(index, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return index, root
}

func indexTool(id, modulePath string) map[string]any {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(examples.EchoManifest, &m)
	return map[string]any{"id": id, "version": "1.0", "description": "echo", "input": m["input"], "output": m["output"],
		"modulePath": modulePath, "sandbox": "context-isolated", "limits": map[string]any{"memMB": 64, "cpuMs": 1000}, "mutating": false}
}

// A Kindgi pack index: modulePath names the source file; the .wasm beside
// it is served. Versions that are not semver still pin.
func TestIndexSource(t *testing.T) {
	index, root := writeIndex(t, []map[string]any{
		indexTool("acme.echo", "tools/echo/index.ts"),
		indexTool("acme.echo2", "bundle/echo.wasm"),
	}, map[string]any{"required": []string{"SANDBOXD_TEST_PRESENT"}, "optional": []string{}},
		map[string][]byte{"tools/echo/index.wasm": examples.EchoWasm, "bundle/echo.wasm": examples.EchoWasm})
	t.Setenv("SANDBOXD_TEST_PRESENT", "yes")
	ts := start(t, server.IndexSource{Index: index, ModuleRoot: root}, server.Options{})
	wantResult(t, ts.invoke(t, invokeBody("acme.echo2", `{"message":"i"}`)), `{"echo":"i","length":1}`)
	wantResult(t, ts.invoke(t, `{"v":2,"kind":"invoke","tool":{"id":"acme.echo","version":"1.0"},"input":{"message":"v"},"ctx":{"tenantId":"t","runId":"r"}}`), "")
	wantError(t, ts.invoke(t, `{"v":2,"kind":"invoke","tool":{"id":"acme.echo","version":"1.0.0"},"input":{"message":"v"},"ctx":{"tenantId":"t","runId":"r"}}`), "tool-version-mismatch")
	r, err := do(t, context.Background(), "GET", ts.url+"/v1/info", nil, authJSON())
	if err != nil {
		t.Fatal(err)
	}
	validate(t, "info", r.body)
	want := `{"protocol":2,"packId":"acme","packVersion":"2.0.0","artifactVersion":"20260920.1","tools":[{"id":"acme.echo","version":"1.0"},{"id":"acme.echo2","version":"1.0"}],"checks":[],"missingEnv":[]}`
	if strings.TrimSpace(string(r.body)) != want {
		t.Errorf("info\n%s\nwant\n%s", r.body, want)
	}
}

// A required env name that is missing keeps the service unready (strict)
// and is listed in /v1/info; EnvCheckWarn keeps it ready.
func TestIndexMissingEnv(t *testing.T) {
	index, root := writeIndex(t, []map[string]any{indexTool("acme.echo", "echo.wasm")},
		map[string]any{"required": []string{"SANDBOXD_TEST_ABSENT_B", "SANDBOXD_TEST_ABSENT_A"}, "optional": []string{}},
		map[string][]byte{"echo.wasm": examples.EchoWasm})
	exec := newExecutor(t, executor.NewConfig())
	ts := startWith(t, exec, server.IndexSource{Index: index, ModuleRoot: root}, server.Options{})
	r, _ := do(t, context.Background(), "GET", ts.url+"/readyz", nil, nil)
	if r.status != 503 {
		t.Errorf("readyz %d", r.status)
	}
	if r := ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`)); r.status != 503 {
		t.Errorf("invoke while not ready: %d", r.status)
	}
	r, _ = do(t, context.Background(), "GET", ts.url+"/v1/info", nil, authJSON())
	validate(t, "info", r.body)
	if !strings.Contains(string(r.body), `"missingEnv":["SANDBOXD_TEST_ABSENT_A","SANDBOXD_TEST_ABSENT_B"]`) {
		t.Errorf("info %s", r.body)
	}
	ts2 := startWith(t, exec, server.IndexSource{Index: index, ModuleRoot: root}, server.Options{EnvCheckWarn: true})
	wantResult(t, ts2.invoke(t, invokeBody("acme.echo", `{"message":"x"}`)), "")
}

// boot-failed lists one problem per missing or unloadable module.
func TestIndexBootProblems(t *testing.T) {
	index, root := writeIndex(t, []map[string]any{
		indexTool("acme.ok", "ok.wasm"),
		indexTool("acme.missing", "tools/missing/index.ts"),
		indexTool("acme.escape", "../outside.wasm"),
		indexTool("acme.abs", "/etc/passwd"),
		indexTool("acme.bad", "bad.wasm"),
		indexTool("acme.forbidden", "forbidden.wasm"),
	}, nil, map[string][]byte{"ok.wasm": examples.EchoWasm, "bad.wasm": []byte("not wasm"), "forbidden.wasm": fixture(t, "forbidden_import")})
	if err := os.WriteFile(filepath.Join(filepath.Dir(root), "outside.wasm"), examples.EchoWasm, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := server.New(context.Background(), newExecutor(t, executor.NewConfig()), server.IndexSource{Index: index, ModuleRoot: root}, server.Options{Token: token})
	var be *server.BootError
	if !errors.As(err, &be) {
		t.Fatalf("err %v", err)
	}
	got := map[string]server.Problem{}
	for _, p := range be.Problems {
		got[p.Tool] = p
	}
	if len(be.Problems) != 5 {
		t.Errorf("problems %+v", be.Problems)
	}
	for _, id := range []string{"acme.missing", "acme.escape", "acme.abs", "acme.bad", "acme.forbidden"} {
		if _, ok := got[id]; !ok {
			t.Errorf("no problem for %s: %+v", id, be.Problems)
		}
	}
	if got["acme.forbidden"].Code != "handler-shape-invalid" {
		t.Errorf("forbidden import problem %+v", got["acme.forbidden"])
	}
	if !strings.Contains(got["acme.missing"].Message, "index.wasm") {
		t.Errorf("missing module problem %+v", got["acme.missing"])
	}
}

func TestIndexRefused(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"v2.json":      `{"v":2,"packId":"a","packVersion":"1","artifactVersion":"1","publishedAt":"x","tools":[],"guardrails":[],"agents":[],"flows":[]}`,
		"unknown.json": `{"v":1,"packId":"a","packVersion":"1","artifactVersion":"1","publishedAt":"x","tools":[],"guardrails":[],"agents":[],"flows":[],"extra":1}`,
		"nopack.json":  `{"v":1,"packVersion":"1","artifactVersion":"1","publishedAt":"x","tools":[],"guardrails":[],"agents":[],"flows":[]}`,
		"notjson.json": `{`,
	} {
		p := filepath.Join(dir, name)
		_ = os.WriteFile(p, []byte(doc), 0o644)
		_, err := server.New(context.Background(), newExecutor(t, executor.NewConfig()), server.IndexSource{Index: p, ModuleRoot: dir}, server.Options{Token: token})
		var be *server.BootError
		if !errors.As(err, &be) || len(be.Problems) != 1 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A directory of manifests; filesystem refs need dev mode. Reload swaps in
// new tools without dropping a call running on the old ones.
func TestDirSourceAndReload(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "echo"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "echo", "tool.json"), examples.EchoManifest, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "echo", "handler.wasm"), examples.EchoWasm, 0o644)

	_, err := server.New(context.Background(), newExecutor(t, executor.NewConfig()), server.DirSource{Dir: dir}, server.Options{Token: token})
	var be *server.BootError
	if !errors.As(err, &be) || be.Problems[0].Code != "artifact-refused" {
		t.Fatalf("filesystem ref without dev mode: %v", err)
	}

	exec := newExecutor(t, executor.NewConfig().WithDevMode(true))
	ts := startWith(t, exec, server.DirSource{Dir: dir, PackID: "local"}, server.Options{})
	wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"a"}`)), "")

	// A long call on a tool the reload keeps.
	loop := tool(t, "t.loop", "loop", 16, 600_000, map[string]any{"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "loop.wasm"}})
	_ = os.WriteFile(filepath.Join(dir, "loop.wasm"), loop.Module, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "loop.tool.json"), loop.Manifest, 0o644)
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	held := make(chan *response, 1)
	go func() {
		r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)), authJSON("kindgi-timeout-ms", "800"))
		held <- r
	}()
	eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
	// A broken manifest: the reload fails, the old tools keep serving.
	_ = os.WriteFile(filepath.Join(dir, "broken.tool.json"), []byte(`{"id":"x"}`), 0o644)
	if err := ts.Reload(context.Background()); err == nil {
		t.Fatal("reload with a broken manifest succeeded")
	}
	if len(ts.logs.records(t, "reload-failed")) != 1 {
		t.Error("no reload-failed event")
	}
	// A reload stopped by its context (SIGTERM) is reload-stopped, not a
	// failure of the pack.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ts.Reload(stopped); err == nil {
		t.Fatal("reload with a cancelled context succeeded")
	}
	if len(ts.logs.records(t, "reload-failed")) != 1 || len(ts.logs.records(t, "reload-stopped")) != 1 {
		t.Errorf("a cancelled reload: reload-failed %d (want the 1 from before), reload-stopped %d (want 1)",
			len(ts.logs.records(t, "reload-failed")), len(ts.logs.records(t, "reload-stopped")))
	}
	_ = os.Remove(filepath.Join(dir, "broken.tool.json"))
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-held:
		checkAnswer(t, r)
		wantError(t, r, "deadline-exceeded")
	case <-time.After(10 * time.Second):
		t.Fatal("held call lost across reloads")
	}
	r, _ := do(t, context.Background(), "GET", ts.url+"/v1/info", nil, authJSON())
	validate(t, "info", r.body)
	if !strings.Contains(string(r.body), `"tools":[{"id":"acme.echo","version":"1.0.0"},{"id":"t.loop","version":"1.0.0"}]`) {
		t.Errorf("info after reload %s", r.body)
	}
	wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"after"}`)), "")
}

// An index with guardrail checks serves them: /v1/info lists their check
// ids, a check-invoke runs the check module as a tool (config validated
// against configSchema as sent, the result validated), and an unknown id
// is check-not-in-pack with checkId.
func TestIndexChecks(t *testing.T) {
	checks, err := os.ReadFile("../pack/testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.SkipShort(t, "checks_reactor", int64(len(checks)))
	guardrails := []any{
		map[string]any{"id": "acme.response-not-empty", "kind": "zero-llm", "action": map[string]any{"on-violation": "halt"},
			"checkModulePath": "guardrails/min-length/index.ts", "checkId": "acme.checks.min-length",
			"configSchema": map[string]any{"type": "object", "required": []string{"minLength"},
				"properties": map[string]any{"minLength": map[string]any{"type": "integer"}, "mode": map[string]any{"type": "string", "default": "x"}}},
			"limits": map[string]any{"memMB": 64, "cpuMs": 2000}},
		map[string]any{"id": "acme.no-verdict", "kind": "zero-llm", "action": map[string]any{"on-violation": "log-only"}, "checkModulePath": "echo.wasm"},
	}
	index, root := writeIndex(t, []map[string]any{indexTool("acme.echo", "echo.wasm")},
		map[string]any{"required": []string{}, "optional": []string{}, "guardrails": guardrails},
		map[string][]byte{"echo.wasm": examples.EchoWasm, "checks/all.wasm": checks, "bundle-map.json": []byte(`{"guardrails/min-length/index.ts":"checks/all.wasm"}`)})
	bm, err := pack.ReadBundleMap(filepath.Join(root, "bundle-map.json"))
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, server.IndexSource{Index: index, ModuleRoot: root, BundleMap: bm}, server.Options{})
	r, err := do(t, context.Background(), "GET", ts.url+"/v1/info", nil, authJSON())
	if err != nil {
		t.Fatal(err)
	}
	validate(t, "info", r.body)
	if !strings.Contains(string(r.body), `"checks":["acme.checks.min-length","acme.no-verdict"]`) {
		t.Errorf("info %s", r.body)
	}
	checkInvoke := func(id, config string) *response {
		return ts.invoke(t, fmt.Sprintf(`{"v":2,"kind":"check-invoke","check":{"id":%q},"config":%s,"trace":{"runId":"r1","tenantId":"t1","output":"Recorded.","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"}}`, id, config))
	}
	r = checkInvoke("acme.checks.min-length", `{"minLength":1}`)
	t.Logf("check-invoke round trip: %d %s", r.status, strings.TrimSpace(string(r.body)))
	if m := r.msg(t); m["kind"] != "check-result" || fmt.Sprint(m["result"]) != "map[passed:true reason:long enough]" {
		t.Fatalf("check-result %s", r.body)
	}
	if m := checkInvoke("acme.checks.min-length", `{"minLength":50}`).msg(t); fmt.Sprint(m["result"]) != "map[attributes:map[length:9] passed:false reason:output shorter than minLength]" {
		t.Errorf("a failing check %v", m)
	}
	m := wantError(t, checkInvoke("acme.checks.min-length", `{"minLength":"one"}`), "input-validation-failed")
	if m["checkId"] != "acme.checks.min-length" || m["toolId"] != nil || m["message"] != `Check "acme.checks.min-length" config failed validation at /minLength: must be integer` || m["issues"] == nil {
		t.Errorf("config refused %v", m)
	}
	m = wantError(t, checkInvoke("acme.no-verdict", `{}`), "output-validation-failed")
	if m["checkId"] != "acme.no-verdict" {
		t.Errorf("no verdict %v", m)
	}
	m = wantError(t, checkInvoke("nope", `{}`), "check-not-in-pack")
	if m["checkId"] != "nope" || m["message"] != `This pack has no check "nope"` {
		t.Errorf("unknown check %v", m)
	}
	wantError(t, checkInvoke("acme.checks.min-length", `{"minLength":1,"mode":"throw"}`), "handler-throw")
	if calls := ts.logs.records(t, "call"); len(calls) < 6 || calls[0]["target"] != "check" || calls[0]["tenantId"] != "t1" {
		t.Errorf("call records %v", calls)
	}
	wantResult(t, ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`)), "")

	// Boot fails on a check module that cannot be loaded, as for a tool.
	guardrails[0].(map[string]any)["checkModulePath"] = "guardrails/gone.ts"
	index, root = writeIndex(t, []map[string]any{indexTool("acme.echo", "echo.wasm")},
		map[string]any{"required": []string{}, "optional": []string{}, "guardrails": guardrails}, map[string][]byte{"echo.wasm": examples.EchoWasm})
	_, err = server.New(context.Background(), newExecutor(t, executor.NewConfig()), server.IndexSource{Index: index, ModuleRoot: root}, server.Options{Token: token})
	var be *server.BootError
	if !errors.As(err, &be) || len(be.Problems) != 1 || be.Problems[0].Tool != "acme.checks.min-length" || be.Problems[0].Code != "artifact-unavailable" {
		t.Fatalf("boot with a missing check module: %v", err)
	}
}
