package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/conformance"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/server"
)

// examplePackTree lays out examples/pack's identity and lookup tools and
// examples/echo's as ROOT/pack/*.tool.json with the modules where
// examples/index/index.json says they are (pack/…, echo/handler.wasm).
func examplePackTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"identity.tool.json", "identity.wasm", "lookup.tool.json", "lookup.wasm"} {
		copyFile(t, filepath.Join("..", "..", "examples", "pack", f), filepath.Join(root, "pack", f))
	}
	copyFile(t, filepath.Join("..", "..", "examples", "echo", "handler.wasm"), filepath.Join(root, "echo", "handler.wasm"))
	echo, err := os.ReadFile(filepath.Join("..", "..", "examples", "echo", "tool.json"))
	if err != nil {
		t.Fatal(err)
	}
	echo = bytes.Replace(echo, []byte(`"modulePath": "handler.wasm"`), []byte(`"modulePath": "../echo/handler.wasm"`), 1)
	if err := os.WriteFile(filepath.Join(root, "pack", "echo.tool.json"), echo, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestIndexMatchesExample: index over the example tools writes
// examples/index/index.json byte for byte (sorted keys and ids, two-space
// indent, trailing newline), valid against the pack-index schema, and
// conformance --index passes it with no --module-root.
func TestIndexMatchesExample(t *testing.T) {
	root := examplePackTree(t)
	out := filepath.Join(root, "index.json")
	code, _, stderr := runCLI(t, "", "index", "--tools", filepath.Join(root, "pack"), "-o", out,
		"--pack-id", "acme", "--pack-version", "1.0.0", "--artifact-version", "20261201.1", "--published-at", "2026-12-01T00:00:00.000Z")
	if code != exitOK || !strings.Contains(stderr, "3 tool(s), 0 guardrail(s)") {
		t.Fatalf("index: exit %d: %s", code, stderr)
	}
	got, _ := os.ReadFile(out)
	want, err := os.ReadFile(filepath.Join("..", "..", "examples", "index", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("index differs from examples/index/index.json:\n%s", got)
	}
	if lines, err := pack.ValidateIndex(got); err != nil || len(lines) > 0 {
		t.Fatalf("ValidateIndex: %v %v", lines, err)
	}
	code, stdout, stderr := runCLI(t, "", "conformance", "--index", out)
	if code != exitOK || !strings.Contains(stdout, "valid against pack-index.schema.json 1.4.0: 3 tool(s)") {
		t.Fatalf("conformance --index without --module-root: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestIndexDefaults: the defaults are DIR/index.json, packId from DIR's
// name, artifactVersion YYYYMMDD.N counting up over a previous index of
// the same day, publishedAt now in milliseconds.
func TestIndexDefaults(t *testing.T) {
	root := examplePackTree(t)
	// the modules live outside pack/: the default module root (pack/) refuses
	code, _, stderr := runCLI(t, "", "index", "--tools", filepath.Join(root, "pack"))
	if code != exitError || !strings.Contains(stderr, "is outside the module root") || !strings.Contains(stderr, "nothing written") {
		t.Fatalf("module outside the root: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "pack", "index.json")); err == nil {
		t.Fatal("an index was written despite problems")
	}
	dir := filepath.Join(root, "My Pack")
	copyFile(t, filepath.Join(root, "pack", "identity.tool.json"), filepath.Join(dir, "identity.tool.json"))
	copyFile(t, filepath.Join(root, "pack", "identity.wasm"), filepath.Join(dir, "identity.wasm"))
	read := func() map[string]any {
		t.Helper()
		code, _, stderr := runCLI(t, "", "index", "--tools", dir)
		if code != exitOK {
			t.Fatalf("index: exit %d: %s", code, stderr)
		}
		b, err := os.ReadFile(filepath.Join(dir, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, second := read(), read()
	av1, _ := first["artifactVersion"].(string)
	av2, _ := second["artifactVersion"].(string)
	if first["packId"] != "my-pack" || first["packVersion"] != "0.1.0" || !strings.HasSuffix(av1, ".1") || av2 != strings.TrimSuffix(av1, "1")+"2" {
		t.Fatalf("defaults: %v %v %s %s", first["packId"], first["packVersion"], av1, av2)
	}
	if p, _ := first["publishedAt"].(string); len(p) != len("2026-12-01T00:00:00.000Z") || !strings.HasSuffix(p, "Z") {
		t.Fatalf("publishedAt %q", p)
	}
	tools, _ := first["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["modulePath"] != "identity.wasm" {
		t.Fatalf("tools %v", tools)
	}
}

// TestIndexProblemsAllAtOnce: every manifest problem is listed, and an
// index whose module is not built says to build it.
func TestIndexProblemsAllAtOnce(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := `"version":"1.0.0","description":"d","input":{"type":"object"},"output":{"type":"object"}`
	write("a.tool.json", `{"id":"a",`+base+`,"codeArtifactRef":{"kind":"oci","imageRef":"r.example/a:1","modulePath":"a.wasm","artifactVersion":"1"}}`)
	write("b.tool.json", `{"id":"b",`+base+`}`)
	write("c.tool.json", `{"id":"c",`+base+`,"limts":{}}`)
	code, _, stderr := runCLI(t, "", "index", "--tools", dir)
	for _, want := range []string{`a.tool.json: codeArtifactRef kind "oci"`, "b.tool.json: no codeArtifactRef", "c.tool.json: invalid-tool-definition", "3 problem(s); nothing written"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("missing %q in:\n%s", want, stderr)
		}
	}
	if code != exitError {
		t.Errorf("exit %d", code)
	}
	dir = t.TempDir()
	write("tool.json", `{"id":"d",`+base+`,"codeArtifactRef":{"kind":"filesystem","modulePath":"handler.wasm"}}`)
	code, _, stderr = runCLI(t, "", "index", "--tools", dir)
	if code != exitError || !strings.Contains(stderr, "handler.wasm") || !strings.Contains(stderr, "build it first") {
		t.Fatalf("unbuilt module: exit %d: %s", code, stderr)
	}
}

// TestIndexCheckTool: a manifest with metadata["sandboxd.check"] becomes
// a guardrail whose configSchema is the input's config property, and the
// index loads it as a check.
func TestIndexCheckTool(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, filepath.Join("..", "..", "pack", "testdata", "checks_reactor.wasm"), filepath.Join(dir, "check.wasm"))
	m := `{"id":"acme.checks.min-length","version":"1.0.0","description":"d",
	"input":{"type":"object","required":["config","trace"],"properties":{"config":{"type":"object","properties":{"minLength":{"type":"integer"}}},"trace":true}},
	"output":{"type":"object","required":["passed"]},
	"codeArtifactRef":{"kind":"filesystem","modulePath":"check.wasm"},
	"metadata":{"sandboxd.check":{"guardrail":"min-length","kind":"zero-llm","action":{"on-violation":"halt"},"config":{"minLength":1}}}}`
	if err := os.WriteFile(filepath.Join(dir, "tool.json"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "index.json")
	if code, _, stderr := runCLI(t, "", "index", "--tools", dir, "--pack-id", "acme"); code != exitOK {
		t.Fatalf("index: exit %d: %s", code, stderr)
	}
	p, problems := pack.IndexSource{Index: out, ModuleRoot: dir}.Read()
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(p.Tools) != 0 || len(p.Checks) != 1 {
		t.Fatalf("tools %d checks %d", len(p.Tools), len(p.Checks))
	}
	c := p.Checks[0]
	if c.ID != "acme.checks.min-length" || c.Guardrail != "min-length" || c.Kind != "zero-llm" || !strings.Contains(string(c.ConfigSchema), "minLength") {
		t.Fatalf("check %+v", c)
	}
}

// TestPushPackListsEveryProblem: push-pack refuses an index that breaks the
// pack-index schema, naming every missing property and every unreadable
// module at once, and pushes nothing.
func TestPushPackListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	ix := filepath.Join(dir, "index.json")
	os.WriteFile(ix, []byte(`{"v":1,"packId":"a","packVersion":"1","artifactVersion":"1","tools":[{"id":"x","input":{},"output":{},"modulePath":"nope.wasm"}]}`), 0o644)
	layout := filepath.Join(dir, "layout")
	code, _, stderr := runCLI(t, "", "push-pack", "--index", ix, "oci-layout:"+layout+":1")
	for _, want := range []string{"missing properties 'publishedAt', 'guardrails', 'agents', 'flows'", "nope.wasm", "2 problem(s); nothing pushed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("missing %q in:\n%s", want, stderr)
		}
	}
	if code != exitError {
		t.Errorf("exit %d", code)
	}
	if _, err := os.Stat(layout); err == nil {
		t.Error("push-pack wrote the layout despite the problems")
	}
}

// TestMCPRefusalAgrees: conformance's mcp warning fires exactly when
// sandboxd mcp refuses the tool.
func TestMCPRefusalAgrees(t *testing.T) {
	for _, tc := range []struct{ id, input string }{
		{"acme.greet", `{"type":"object"}`},
		{"me hog", `{"type":"object"}`},
		{"x/y", `{"type":"object"}`},
		{strings.Repeat("a", 128), `{"type":"object"}`},
		{strings.Repeat("a", 129), `{"type":"object"}`},
		{"acme.s", `{"type":"string"}`},
		{"acme.n", `{}`},
		{"acme.u", `{"type":["object"]}`},
	} {
		m := &manifest.Manifest{ID: tc.id, Input: json.RawMessage(tc.input), Output: json.RawMessage(`{"type":"object"}`)}
		_, err := mcp.ToolFor(server.CatalogTool{ID: tc.id, Manifest: m})
		warn := conformance.MCPRefusal(tc.id, m.Input)
		if (err == nil) != (warn == "") {
			t.Errorf("%q %s: mcp.ToolFor %v, conformance %q", tc.id, tc.input, err, warn)
		}
	}
}
