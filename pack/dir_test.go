package pack_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/pack"
)

func TestEmbeddedSchemasMatchSpec(t *testing.T) {
	for embedded, spec := range map[string]string{
		"schema/pack.schema.json":       "../spec/kindgi-pack.schema.json",
		"schema/pack-index.schema.json": "../spec/kindgi-pack-index.schema.json",
		"schema/guardrail.schema.json":  "../spec/kindgi-guardrail.schema.json",
		"schema/tool.schema.json":       "../spec/kindgi-tool.schema.json",
	} {
		a, errA := os.ReadFile(embedded)
		b, errB := os.ReadFile(spec)
		if errA != nil || errB != nil {
			t.Fatalf("%v %v", errA, errB) // a missing file fails, never skips
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: copy the vendored schema again", embedded, spec)
		}
	}
}

const echoManifest = `{"id":"acme.echo","version":"1.0.0","description":"Echo.","input":{"type":"object"},"output":{"type":"object"},
 "codeArtifactRef":{"kind":"filesystem","modulePath":"echo.wasm"}}`

func ids(p *pack.Pack) string {
	var out []string
	for _, t := range p.Tools {
		out = append(out, "tool:"+t.ID+"@"+t.Source)
	}
	for _, c := range p.Checks {
		out = append(out, "check:"+c.ID+"@"+c.Source)
	}
	for _, b := range p.Builtin {
		out = append(out, "builtin:"+b)
	}
	return strings.Join(out, " ")
}

// TestDiscoverManifests is the regression test for `serve --tools
// examples/echo` reading input.json as a manifest: one rule, and only
// manifests match it.
func TestDiscoverManifests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tool.json"), []byte(echoManifest))
	writeFile(t, filepath.Join(dir, "input.json"), []byte(`{"message":"hi"}`))
	writeFile(t, filepath.Join(dir, "b.tool.json"), []byte(strings.Replace(echoManifest, "acme.echo", "acme.b", 1)))
	writeFile(t, filepath.Join(dir, "c", "tool.json"), []byte(strings.Replace(echoManifest, "acme.echo", "acme.c", 1)))
	writeFile(t, filepath.Join(dir, "c", "input.json"), []byte(`{}`))
	writeFile(t, filepath.Join(dir, "echo.cases.json"), []byte(`{"tool":"acme.echo","cases":[]}`))
	p, problems := pack.Discover(dir)
	if p == nil || len(problems) > 0 {
		t.Fatal(problems)
	}
	if got := ids(p); got != "tool:acme.b@b.tool.json tool:acme.c@c/tool.json tool:acme.echo@tool.json" {
		t.Fatalf("found %s", got)
	}
	if p.Layout != pack.LayoutManifests || p.Deploy {
		t.Errorf("layout %s deploy %v", p.Layout, p.Deploy)
	}
	abs, _ := filepath.Abs(filepath.Join(dir, "c"))
	if p.Tools[1].BaseDir != abs {
		t.Errorf("BaseDir = %s, want %s", p.Tools[1].BaseDir, abs)
	}

	// The repository's own example directory.
	p, problems = pack.Discover("../examples/echo")
	if p == nil || len(problems) > 0 || ids(p) != "tool:acme.echo@tool.json" {
		t.Fatalf("examples/echo: %v %v", ids(p), problems)
	}
}

func TestDiscoverSandboxdPackJSON(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.tool.json"), []byte(echoManifest))
	writeFile(t, filepath.Join(dir, "pack.json"), []byte(`{"deploy":true}`))
	if p, problems := pack.Discover(dir); p == nil || len(problems) > 0 || !p.Deploy || p.Layout != pack.LayoutManifests {
		t.Fatalf("%+v %v", p, problems)
	}
	writeFile(t, filepath.Join(dir, "pack.json"), []byte(`{"deploy":true,"id":"acme"}`))
	if p, problems := pack.Discover(dir); p != nil || len(problems) != 1 || !strings.Contains(problems[0].Message, "neither Kindgi's") {
		t.Fatalf("%+v %v", p, problems)
	}
	if p, problems := pack.Discover(t.TempDir()); p == nil || len(problems) != 1 || !strings.Contains(problems[0].Message, "no tool manifests") {
		t.Fatalf("empty dir: %+v %v", p, problems)
	}
}

// kindgiPackDir writes a pack.json to Kindgi's schema with tools and
// guardrails by path and inline.
func kindgiPackDir(t testing.TB, packJSON string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tools", "echo.json"), []byte(echoManifest))
	writeFile(t, filepath.Join(dir, "tools", "echo.wasm"), echoWasm(t))
	writeFile(t, filepath.Join(dir, "guardrails", "checks.wasm"), checksWasm(t))
	writeFile(t, filepath.Join(dir, "guardrails", "min-length.json"), []byte(`{
  "id": "acme.min-length", "kind": "zero-llm", "check": "acme.checks.min-length",
  "action": {"on-violation": "halt"}, "config": {"minLength": 3},
  "configSchema": {"type": "object", "properties": {"minLength": {"type": "integer"}}},
  "limits": {"memMB": 64, "cpuMs": 1000},
  "codeArtifactRef": {"kind": "filesystem", "modulePath": "checks.wasm"}}`))
	writeFile(t, filepath.Join(dir, "pack.json"), []byte(packJSON))
	return dir
}

const kindgiPackJSON = `{
  "manifestVersion": "1.0", "id": "com.acme.support", "version": "1.0.0-rc.1", "name": "Acme support",
  "tools": [
    {"path": "tools/echo.json"},
    {"id": "acme.inline", "version": "2.0.0", "description": "Inline.", "input": {"type": "object"}, "output": {"type": "object"},
     "codeArtifactRef": {"kind": "filesystem", "modulePath": "tools/echo.wasm"}}
  ],
  "guardrails": [
    {"path": "guardrails/min-length.json"},
    {"id": "acme.inline-check", "kind": "zero-llm", "check": "acme.checks.inline", "action": {"on-violation": "log-only"},
     "codeArtifactRef": {"kind": "filesystem", "modulePath": "guardrails/checks.wasm"}},
    {"id": "acme.cites", "kind": "zero-llm", "check": "must-cite", "action": {"on-violation": "halt"}}
  ]
}`

func TestDiscoverKindgiPackJSON(t *testing.T) {
	dir := kindgiPackDir(t, kindgiPackJSON)
	p, problems := pack.Discover(dir)
	if p == nil || len(problems) > 0 {
		t.Fatal(problems)
	}
	want := "tool:acme.echo@tools/echo.json tool:acme.inline@pack.json#/tools/1 " +
		"check:acme.checks.inline@pack.json#/guardrails/1 check:acme.checks.min-length@guardrails/min-length.json builtin:acme.cites"
	if got := ids(p); got != want {
		t.Fatalf("found %s\nwant  %s", got, want)
	}
	if p.Layout != pack.LayoutKindgiPack || p.ID != "com.acme.support" || p.Version != "1.0.0-rc.1" {
		t.Errorf("%+v", p)
	}
	// A file's relative paths resolve from its own directory; an inline
	// declaration's from the pack directory.
	absDir, _ := filepath.Abs(dir)
	if p.Tools[0].BaseDir != filepath.Join(absDir, "tools") || p.Tools[1].BaseDir != absDir || p.Checks[1].BaseDir != filepath.Join(absDir, "guardrails") {
		t.Errorf("base dirs %s %s %s", p.Tools[0].BaseDir, p.Tools[1].BaseDir, p.Checks[1].BaseDir)
	}
	if err := p.Checks[1].ValidateConfig(); err != nil {
		t.Error(err)
	}
}

func TestDiscoverKindgiPackJSONRefused(t *testing.T) {
	for _, tc := range []struct {
		name, edit, with string
		source           bool
		want             string
	}{
		{name: "no name", source: true, edit: `"name": "Acme support",`, want: "missing property 'name'"},
		{name: "unknown field", source: true, edit: `"name": "Acme support",`, with: `"name": "Acme support", "deploy": true,`, want: "additional properties 'deploy'"},
		{name: "inline tool breaks the tool schema", source: true, edit: `"version": "2.0.0",`, want: "/tools/1"},
		{name: "guardrail without check", source: true, edit: `"check": "acme.checks.inline", `, want: "/guardrails/1"},
		{name: "path escapes the pack", edit: `"guardrails/min-length.json"`, with: `"../x.json"`, want: "inside the pack"},
		{name: "path missing", edit: `"tools/echo.json"`, with: `"tools/gone.json"`, want: "tools/gone.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(kindgiPackJSON, tc.edit) {
				t.Fatalf("edit %q not found", tc.edit)
			}
			p, problems := pack.Discover(kindgiPackDir(t, strings.Replace(kindgiPackJSON, tc.edit, tc.with, 1)))
			if (p == nil) != tc.source || len(problems) == 0 {
				t.Fatalf("pack %v problems %v", p, problems)
			}
			var all []string
			for _, pr := range problems {
				all = append(all, pr.String())
			}
			got := strings.Join(all, "\n")
			if !strings.Contains(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant %q", got, tc.want)
			}
			t.Logf("%s", got)
		})
	}
	// A guardrail file that breaks the guardrail schema.
	dir := kindgiPackDir(t, kindgiPackJSON)
	writeFile(t, filepath.Join(dir, "guardrails", "min-length.json"), []byte(`{"id":"x","kind":"zero-llm","action":{"on-violation":"halt"}}`))
	if p, problems := pack.Discover(dir); p == nil || len(problems) != 1 || !strings.Contains(problems[0].Message, "missing property 'check'") {
		t.Fatalf("%v", problems)
	}
}
