package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// tsSDKDir is where .ci/deps.d/30-mcp.sh installs the TypeScript SDK.
func tsSDKDir(t *testing.T) string {
	t.Helper()
	missing := func(format string, a ...any) string {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format+"; CI=true requires it (.ci/deps.d/30-mcp.sh)", a...)
		}
		t.Skipf(format+" (make tools)", a...)
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		return missing("node is not on PATH")
	}
	tools := os.Getenv("SANDBOXD_TOOLS")
	if tools == "" {
		tools = filepath.Join("..", "..", ".tools")
	}
	dir, _ := filepath.Abs(filepath.Join(tools, "mcp-node"))
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	var pkg struct{ Version string }
	if err != nil || json.Unmarshal(b, &pkg) != nil || pkg.Version == "" {
		return missing("@modelcontextprotocol/sdk@1.32.2 is not installed in %s", dir)
	}
	if pkg.Version != "1.32.2" {
		return missing("@modelcontextprotocol/sdk@1.32.2 is needed in %s, found %s", dir, pkg.Version)
	}
	return dir
}

// Interop with a client nobody here wrote: the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.32.2) spawns sandboxd mcp --tools
// examples/pack --dev, and talks to serve --mcp over Streamable HTTP with
// the bearer token (mcp/testdata/interop.cjs makes the checks).
func TestMCPInteropTypeScript(t *testing.T) {
	sdkDir := tsSDKDir(t)
	bin := sandboxdBinary(t)
	script, _ := filepath.Abs(filepath.Join("..", "..", "mcp", "testdata", "interop.cjs"))
	pack, _ := filepath.Abs(examplePack)
	run := func(t *testing.T, args ...string) {
		t.Helper()
		cmd := exec.Command("node", append([]string{script, sdkDir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if len(l) > 600 {
				l = l[:600] + "…"
			}
			t.Log(l)
		}
		if err != nil || !strings.Contains(string(out), `{"step":"ok"}`) {
			t.Fatalf("node: %v\n%s", err, stderr.String())
		}
	}
	t.Run("stdio", func(t *testing.T) {
		begun := time.Now()
		run(t, "stdio", bin, "mcp", "--tools", pack, "--dev", "--cache-dir", sandboxtest.CacheDir(t))
		t.Logf("session took %v", time.Since(begun))
	})
	t.Run("streamable-http", func(t *testing.T) {
		base, stop := startServeMCP(t, bin)
		run(t, "http", base+"/mcp", "tok-mcp")
		stderr := stop()
		if st := processEvents(t, stderr, "stopped"); len(st) != 1 || st[0]["abandoned"] != 0.0 {
			t.Errorf("stopped %v", st)
		}
	})
}
