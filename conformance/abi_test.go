package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// TestABILineNamesTheABI: the abi check's reason names the ABI beside the
// style — Extism for a module importing extism:host/env (the two-export WAT
// plug-in, its tool choosing #shout), ABI v1 for the sample pack's echo.
func TestABILineNamesTheABI(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "two.wasm"), sandboxtest.WATFile(t, "testdata/wasm/extism/two_exports.wat"), 0o644); err != nil {
		t.Fatal(err)
	}
	man := `{"id":"t.shout","version":"1.0.0","description":"upper-cases its input","input":{"type":"string"},"output":{"type":"string"},
"sandbox":"strict","limits":{"memMB":16,"cpuMs":1000},"mutating":false,"codeArtifactRef":{"kind":"filesystem","modulePath":"two.wasm#shout"}}`
	if err := os.WriteFile(filepath.Join(dir, "shout.tool.json"), []byte(man), 0o644); err != nil {
		t.Fatal(err)
	}
	for source, want := range map[string]string{dir: "reactor handler (Extism)", samplePack: "reactor handler (ABI v1)"} {
		rep := run(t, source, Options{})
		found := false
		for _, c := range rep.Checks {
			if c.Name == "abi" {
				t.Logf("%s: %s %s %s", c.Tool, c.Name, c.Status, c.Reason)
				if c.Status != StatusPass || !strings.HasPrefix(c.Reason, want) {
					t.Errorf("%s abi: %s %q, want a pass starting %q", c.Tool, c.Status, c.Reason, want)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no abi check", source)
		}
	}
}
