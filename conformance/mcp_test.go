package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMCPRefusal(t *testing.T) {
	for _, tc := range []struct {
		id    string
		input string
		want  string // substring of the refusal; "" for servable
	}{
		{"acme.greet", `{"type":"object"}`, ""},
		{"a_b-c.D9", `{"type":"object","properties":{}}`, ""},
		{"me hog", `{"type":"object"}`, `not an MCP tool name (1-128 characters of A-Z a-z 0-9 _ . -; e.g. "me-hog")`},
		{"", `{"type":"object"}`, "not an MCP tool name"},
		{strings.Repeat("a", 129), `{"type":"object"}`, "not an MCP tool name"},
		{"acme.s", `{"type":"string"}`, `input schema's root is not {"type": "object"}`},
		{"acme.u", `{"type":["object","null"]}`, `input schema's root is not {"type": "object"}`},
		{"acme.t", `true`, `input schema's root is not {"type": "object"}`},
	} {
		got := MCPRefusal(tc.id, json.RawMessage(tc.input))
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("MCPRefusal(%q, %s) = %q, want %q", tc.id, tc.input, got, tc.want)
		}
	}
}

// TestMCPWarning: a tool whose id MCP refuses passes conformance with an
// "mcp" warning.
func TestMCPWarning(t *testing.T) {
	dir := t.TempDir()
	err := os.WriteFile(filepath.Join(dir, "tool.json"), []byte(`{"id":"me hog","version":"1.0.0","description":"d",
		"input":{"type":"object"},"output":{"type":"object"},"limits":{"memMB":16,"cpuMs":100},
		"codeArtifactRef":{"kind":"filesystem","modulePath":"m.wasm"}}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, dir, Options{})
	for _, c := range rep.Checks {
		if c.Name == "mcp" {
			if c.Status != StatusWarn || !strings.Contains(c.Reason, `"me hog" is not an MCP tool name`) || !strings.Contains(c.Reason, "sandboxd mcp refuses to boot") {
				t.Fatalf("mcp check: %+v", c)
			}
			return
		}
	}
	t.Fatalf("no mcp warning: %+v", rep.Checks)
}
