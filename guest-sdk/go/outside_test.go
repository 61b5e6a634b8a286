package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// These tests follow README.md's "In your own module" to the letter: they
// take the Go handler of "Writing a handler in Go" and the shell blocks of
// "In your own module" from README.md itself, run each command in a new
// directory outside the repository, beside a link named sandboxd to this
// clone, and invoke the module the last command built. A README edit that
// breaks the recipe fails them.

func TestOutsideModuleReplace(t *testing.T) {
	// -mod=mod: go mod tidy and the build may update go.mod/go.sum, as in a
	// new user's module; GOWORK=off so no workspace of the caller applies.
	testOutsideModule(t, 0, "GOFLAGS=-mod=mod", "GOWORK=off")
}

func TestOutsideModuleWorkspace(t *testing.T) {
	// A workspace refuses -mod=mod; GOWORK unset so go finds the go.work
	// that go work init writes.
	testOutsideModule(t, 1, "GOFLAGS=")
}

func testOutsideModule(t *testing.T, block int, env ...string) {
	if testing.Short() {
		t.Skip("-short: builds and compiles a multi-MB Go guest")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no go command on PATH; CI=true requires it")
		}
		t.Skip("no go command on PATH")
	}
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	handler := fencedBlock(t, string(readme), "## Writing a handler in Go", "go", 0)
	commands := strings.Split(strings.TrimSpace(fencedBlock(t, string(readme), "### In your own module", "sh", block)), "\n")

	tmp := t.TempDir()
	if err := os.Symlink(root, filepath.Join(tmp, "sandboxd")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "myhandler")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(handler), 0o644); err != nil {
		t.Fatal(err)
	}

	base := []string{"GOTOOLCHAIN=local", "GOFLAGS=", "GOWORK="}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOFLAGS", "GOWORK", "GOOS", "GOARCH", "GOTOOLCHAIN", "CGO_ENABLED", "GOWASM":
		default:
			base = append(base, kv)
		}
	}
	base = append(base, env...)
	for _, line := range commands {
		words := strings.Fields(line)
		var cmdEnv []string
		for len(words) > 0 && strings.Contains(words[0], "=") {
			cmdEnv = append(cmdEnv, words[0])
			words = words[1:]
		}
		if len(words) == 0 || words[0] != "go" {
			t.Fatalf("README command %q: the test runs only go commands", line)
		}
		cmd := exec.Command(gobin, words[1:]...)
		cmd.Dir = dir
		cmd.Env = append(append([]string{}, base...), cmdEnv...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("%s (%.1fs)\n%s", line, time.Since(start).Seconds(), out)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	if gomod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
		t.Logf("go.mod:\n%s", gomod)
	}

	// The module the README built runs: load it under a manifest and call it.
	ctx := context.Background()
	ex, err := executor.New(ctx, executor.NewConfig().WithDevMode(true).WithCacheDir(""))
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close(ctx)
	manifest := `{"id":"acme.outside","version":"1.0.0","description":"README handler built outside the repository",
		"input":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]},
		"output":{"type":"object","properties":{"echo":{"type":"string"}},"required":["echo"]},
		"limits":{"memMB":64,"cpuMs":5000},
		"codeArtifactRef":{"kind":"filesystem","modulePath":"handler.wasm"}}`
	tool, err := ex.Load(ctx, []byte(manifest), executor.WithBaseDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close(ctx)
	res, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{"message":"from outside"}`),
		Context: executor.CallContext{TenantID: "t1", RunID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Echo string }
	if err := json.Unmarshal(res.Output, &got); err != nil || got.Echo != "from outside" {
		t.Fatalf("output %s (%v), want echo \"from outside\"", res.Output, err)
	}
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside a module")
	}
	return filepath.Dir(gomod)
}

// fencedBlock returns the n-th (from 0) ```lang block after the first line
// equal to heading, before the next heading of the same or a higher level.
func fencedBlock(t *testing.T, doc, heading, lang string, n int) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	level := strings.Count(strings.Fields(heading)[0], "#")
	i := 0
	for ; i < len(lines) && lines[i] != heading; i++ {
	}
	if i == len(lines) {
		t.Fatalf("README.md has no heading %q", heading)
	}
	var b bytes.Buffer
	in, seen := false, 0
	for _, l := range lines[i+1:] {
		if !in && strings.HasPrefix(l, "#") {
			h := strings.Fields(l)[0]
			if strings.Trim(h, "#") == "" && len(h) <= level {
				break
			}
		}
		switch {
		case !in && l == "```"+lang:
			in = true
		case in && l == "```":
			if seen == n {
				return b.String()
			}
			in, seen = false, seen+1
			b.Reset()
		case in:
			b.WriteString(l + "\n")
		}
	}
	t.Fatalf("README.md: no ```%s block #%d under %q", lang, n, heading)
	return ""
}
