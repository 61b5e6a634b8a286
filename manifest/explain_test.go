package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

// TestExplainGolden pins the human text of manifest problems (issue 27 §3):
// the discriminated codeArtifactRef is checked by its kind first, enums
// and consts list what is allowed, unknown properties get the nearest
// name, the version pattern gives an example. The Ajv issues themselves
// are unchanged (TestParseErrors pins those).
func TestExplainGolden(t *testing.T) {
	const base = `"id":"acme.x","description":"d","input":{"type":"object"},"output":{"type":"object"}`
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"artifact kind unknown", `{` + base + `,"version":"1.0.0","codeArtifactRef":{"kind":"file","modulePath":"x.wasm"}}`,
			[]string{`manifest/codeArtifactRef/kind must be "oci" or "filesystem" (got "file")`}},
		{"artifact kind selects its branch", `{` + base + `,"version":"1.0.0","codeArtifactRef":{"kind":"filesystem","modulePth":"x.wasm"}}`,
			[]string{`manifest/codeArtifactRef has an unknown property "modulePth" (did you mean "modulePath"?)`}},
		{"oci branch only", `{` + base + `,"version":"1.0.0","codeArtifactRef":{"kind":"oci","modulePath":"x.wasm"}}`,
			[]string{`manifest/codeArtifactRef is missing the required property "imageRef"`, `manifest/codeArtifactRef is missing the required property "artifactVersion"`}},
		{"unknown top-level property", `{` + base + `,"version":"1.0.0","limts":{"memMB":1,"cpuMs":1}}`,
			[]string{`manifest has an unknown property "limts" (did you mean "limits"?)`}},
		{"MCP's inputSchema", `{"id":"acme.x","description":"d","version":"1.0.0","inputSchema":{},"output":{}}`,
			[]string{`manifest has an unknown property "inputSchema" (did you mean "input"?)`}},
		{"enum with a slip", `{` + base + `,"version":"1.0.0","sandbox":"strictt"}`,
			[]string{`manifest/sandbox must be one of "none", "context-isolated", "strict" (got "strictt"; did you mean "strict"?)`}},
		{"enum far off", `{` + base + `,"version":"1.0.0","sandbox":"lax"}`,
			[]string{`manifest/sandbox must be one of "none", "context-isolated", "strict" (got "lax")`}},
		{"version pattern", `{` + base + `,"version":"1.0"}`,
			[]string{`manifest/version must look like 1.0.0 (got "1.0")`}},
		{"type", `{` + base + `,"version":"1.0.0","limits":{"memMB":"64","cpuMs":1}}`,
			[]string{`manifest/limits/memMB must be integer (got "64")`}},
		{"network kind", `{` + base + `,"version":"1.0.0","network":{"kind":"allowlst","hosts":["a"]}}`,
			[]string{`manifest/network/kind must be one of "none", "unrestricted", "allowlist" (got "allowlst"; did you mean "allowlist"?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var te *toolerr.Error
			if !errors.As(err, &te) || te.Code != toolerr.InvalidToolDefinition {
				t.Fatalf("err = %v", err)
			}
			if want := "invalid tool manifest: " + strings.Join(tc.want, "; "); te.Message != want {
				t.Errorf("message\n got %s\nwant %s", te.Message, want)
			}
		})
	}
}
