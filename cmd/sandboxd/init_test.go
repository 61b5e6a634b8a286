package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/manifest"
)

// TestInitWritesEveryTemplate: every --lang (and --kind check) writes its
// files into a new directory, with tool.json a valid manifest whose id is
// derived from the directory name and whose module is where the Makefile
// writes it.
func TestInitWritesEveryTemplate(t *testing.T) {
	sdk, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, tc := range []struct {
		lang, kind string
		source     string
	}{
		{"go", "tool", "main.go"}, {"go", "check", "main.go"}, {"c", "tool", "handler.c"},
		{"wat", "tool", "handler.wat"}, {"extism-go", "tool", "main.go"}, {"assemblyscript", "tool", "index.ts"},
	} {
		dir := filepath.Join(t.TempDir(), "My Tool_"+tc.lang)
		code, stdout, stderr := runCLI(t, "", "init", "--lang", tc.lang, "--kind", tc.kind, "--sdk", sdk, dir)
		if code != exitOK {
			t.Fatalf("%s %s: exit %d: %s", tc.lang, tc.kind, code, stderr)
		}
		wantID := "my-tool_" + tc.lang
		if !strings.Contains(stdout, `"`+wantID+`"`) {
			t.Errorf("%s: stdout %q", tc.lang, stdout)
		}
		for _, f := range []string{tc.source, "tool.json", "input.json", "tool.cases.json", "Makefile", "README.md"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s %s: %v", tc.lang, tc.kind, err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, "tool.json"))
		m, err := manifest.Parse(b)
		if err != nil {
			t.Fatalf("%s: tool.json: %v", tc.lang, err)
		}
		if m.ID != wantID || m.CodeArtifactRef == nil || m.Network == nil {
			t.Errorf("%s: id %q ref %v network %v", tc.lang, m.ID, m.CodeArtifactRef, m.Network)
		}
		mk, _ := os.ReadFile(filepath.Join(dir, "Makefile"))
		if !strings.HasPrefix(strings.SplitN(m.CodeArtifactRef.ModulePath, "#", 2)[0], "handler.wasm") || !strings.Contains(string(mk), "\nhandler.wasm:") {
			t.Errorf("%s: modulePath %q, Makefile target missing", tc.lang, m.CodeArtifactRef.ModulePath)
		}
		cases, _ := os.ReadFile(filepath.Join(dir, "tool.cases.json"))
		if !strings.Contains(string(cases), `"tool": "`+wantID+`"`) {
			t.Errorf("%s: cases do not name %s", tc.lang, wantID)
		}
		for _, f := range []string{tc.source, "tool.json", "Makefile", "README.md"} {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); strings.Contains(string(b), "[[") || strings.Contains(string(b), "<no value>") {
				t.Errorf("%s: %s keeps a template action", tc.lang, f)
			}
		}
	}
}

// TestInitGoModule: the Go templates' go.mod requires the SDK module and
// replaces it with --sdk's tree (absolute), or with the tree this test
// binary was built from when --sdk is absent.
func TestInitGoModule(t *testing.T) {
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, args := range [][]string{{"--sdk", filepath.Join("..", "..")}, nil} {
		dir := filepath.Join(t.TempDir(), "greet")
		code, _, stderr := runCLI(t, "", append(append([]string{"init"}, args...), dir)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
		for _, want := range []string{"module example.com/greet\n", "require github.com/sandboxd/sandboxd " + sdkPlaceholder, "replace github.com/sandboxd/sandboxd => " + filepath.ToSlash(repo) + "\n", "go 1."} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%v: go.mod lacks %q:\n%s", args, want, b)
			}
		}
	}
	code, _, stderr := runCLI(t, "", "init", "--sdk", t.TempDir(), filepath.Join(t.TempDir(), "x"))
	if code != exitUsage || !strings.Contains(stderr, "not a sandboxd source tree") {
		t.Errorf("--sdk of an empty dir: exit %d: %s", code, stderr)
	}
}

// TestInitRefuses: a non-empty DIR, an unknown --lang or --kind, a check
// in another language and an id MCP cannot serve are usage errors that say
// what to do, and nothing is written.
func TestInitRefuses(t *testing.T) {
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep.txt"), []byte("x"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", full}, "is not empty (1 entries, e.g. keep.txt): init never overwrites; name a new or empty directory"},
		{[]string{"init", "--lang", "rust", filepath.Join(t.TempDir(), "a")}, "--lang wants one of go, c, wat, extism-go, assemblyscript"},
		{[]string{"init", "--kind", "agent", filepath.Join(t.TempDir(), "a")}, "--kind wants tool or check"},
		{[]string{"init", "--lang", "wat", "--kind", "check", filepath.Join(t.TempDir(), "a")}, "--kind check is written in Go only"},
		{[]string{"init", "--id", "me hog", filepath.Join(t.TempDir(), "a")}, "a tool id sandboxd mcp can serve"},
		{[]string{"init"}, "want one DIR"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d: %s", tc.args, code, stderr)
		}
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("init wrote into a non-empty directory: %d entries", len(ents))
	}
}

func TestDeriveToolID(t *testing.T) {
	for in, want := range map[string]string{
		"greet": "greet", "My Tool": "my-tool", "acme.greet": "acme.greet", "__x__": "x",
		"héllo wörld": "h-llo-w-rld", "!!!": "my-tool", strings.Repeat("a", 80): strings.Repeat("a", 64),
	} {
		if got := deriveToolID(in); got != want || !mcpToolName.MatchString(got) {
			t.Errorf("deriveToolID(%q) = %q, want %q", in, got, want)
		}
	}
}
