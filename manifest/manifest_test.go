package manifest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

const fullManifest = `{
  "id": "acme.fetch",
  "description": "Fetches a page.",
  "version": "1.2.3",
  "input": {"type": "object", "properties": {"url": {"type": "string"}}},
  "output": {"type": "object"},
  "needs": [{"name": "tenant"}, {"name": "blob", "optional": true}],
  "effects": [{"kind": "network", "resource": "external:example.com", "notes": "GET only"}],
  "transport": "native",
  "mcpEndpoint": "mcp+http://localhost:1234",
  "metadata": {"x.ai/tool": {"kind": "fetch"}, "n": 1.50},
  "sandbox": "strict",
  "mutating": false,
  "limits": {"memMB": 64, "cpuMs": 1e3},
  "network": {"kind": "allowlist", "hosts": ["example.com", "*.example.org:443"]},
  "needsSpec": {
    "env": {"REGION": {"type": "string",  "default": "eu"}},
    "secrets": {"TOKEN": {"type": "string"}},
    "config": {"depth": {"type": "integer"}},
    "capabilities": ["fs.read"],
    "bindings": ["db"]
  },
  "codeArtifactRef": {"kind": "oci", "imageRef": "ghcr.io/acme/fetch@sha256:abc", "modulePath": "fetch.wasm", "artifactVersion": "1.2.3"},
  "spec": {"kind": "http", "method": "GET", "urlTemplate": "https://example.com/{url}"}
}`

func TestParseFull(t *testing.T) {
	m, err := Parse([]byte(fullManifest))
	if err != nil {
		t.Fatal(err)
	}
	f := false
	want := &Manifest{
		ID:          "acme.fetch",
		Description: "Fetches a page.",
		Version:     "1.2.3",
		Input:       json.RawMessage(`{"type": "object", "properties": {"url": {"type": "string"}}}`),
		Output:      json.RawMessage(`{"type": "object"}`),
		Sandbox:     PostureStrict,
		Mutating:    &f,
		Limits:      &Limits{MemMB: 64, CPUMs: 1000},
		Network:     &Network{Kind: "allowlist", Hosts: []string{"example.com", "*.example.org:443"}},
		NeedsSpec: &NeedsSpec{
			Env:          map[string]json.RawMessage{"REGION": json.RawMessage(`{"type": "string",  "default": "eu"}`)},
			Secrets:      map[string]json.RawMessage{"TOKEN": json.RawMessage(`{"type": "string"}`)},
			Config:       map[string]json.RawMessage{"depth": json.RawMessage(`{"type": "integer"}`)},
			Capabilities: []string{"fs.read"},
			Bindings:     []string{"db"},
		},
		CodeArtifactRef: &ArtifactRef{Kind: "oci", ImageRef: "ghcr.io/acme/fetch@sha256:abc", ModulePath: "fetch.wasm", ArtifactVersion: "1.2.3"},
		Spec:            json.RawMessage(`{"kind": "http", "method": "GET", "urlTemplate": "https://example.com/{url}"}`),
		Transport:       "native",
		MCPEndpoint:     "mcp+http://localhost:1234",
		Needs:           []Need{{Name: "tenant"}, {Name: "blob", Optional: true}},
		Effects:         []Effect{{Kind: "network", Resource: "external:example.com", Notes: "GET only"}},
		Metadata:        map[string]any{"x.ai/tool": map[string]any{"kind": "fetch"}, "n": json.Number("1.50")},
		Raw:             json.RawMessage(fullManifest),
	}
	if !reflect.DeepEqual(m, want) {
		gotJ, _ := json.MarshalIndent(m, "", " ")
		wantJ, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("Parse =\n%s\nwant\n%s", gotJ, wantJ)
	}
	if m.Posture() != PostureStrict || m.IsMutating() {
		t.Errorf("Posture() = %q, IsMutating() = %v", m.Posture(), m.IsMutating())
	}
}

func TestParseDoesNotRetainInput(t *testing.T) {
	data := []byte(fullManifest)
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = ' '
	}
	if !strings.HasPrefix(string(m.Input), `{"type": "object"`) || string(m.Raw) != fullManifest {
		t.Errorf("Manifest aliases the caller's buffer: Input = %q", m.Input)
	}
}

func TestParseMinimal(t *testing.T) {
	m, err := Parse([]byte(` {"id":"t","description":"d","version":"0.0.1","input":{},"output":{"type":"string"}} `))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sandbox != "" || m.Posture() != PostureContextIsolated || !m.IsMutating() || m.Mutating != nil ||
		m.Limits != nil || m.Network != nil || m.NeedsSpec != nil || m.CodeArtifactRef != nil ||
		m.Spec != nil || m.Transport != "" || m.Metadata != nil || m.Needs != nil || m.Effects != nil {
		t.Errorf("absent fields not zero: %+v", m)
	}
	if string(m.Input) != `{}` || string(m.Output) != `{"type":"string"}` {
		t.Errorf("Input %s Output %s", m.Input, m.Output)
	}
}

// base is a valid manifest with extra members spliced in.
func base(extra string) string {
	s := `{"id":"t","description":"d","version":"1.0.0","input":{},"output":{}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		message string          // exact Error() text
		issues  []toolerr.Issue // nil: not checked; empty: must be none
	}{
		{
			name:    "not JSON",
			doc:     `{"id":`,
			message: "invalid-tool-definition: manifest is not valid JSON: unexpected end of JSON input at offset 6 (in /id)",
			issues:  []toolerr.Issue{},
		},
		{
			name:    "empty",
			doc:     ``,
			message: "invalid-tool-definition: manifest is not valid JSON: unexpected end of JSON input at offset 0",
		},
		{
			name:    "trailing garbage",
			doc:     base("") + ` {}`,
			message: "invalid-tool-definition: manifest is not valid JSON: invalid character '{' after top-level value at offset 70",
		},
		{
			name:    "duplicate key",
			doc:     `{"id":"t","description":"d","version":"1.0.0","input":{"type":"object","type":"string"},"output":{}}`,
			message: `invalid-tool-definition: manifest is refused: duplicate key "type" at /input/type (offset 71)`,
		},
		{
			name:    "too deep",
			doc:     base(`"metadata":` + strings.Repeat(`[`, 300) + strings.Repeat(`]`, 300)),
			message: "invalid-tool-definition: manifest is refused: exceeded max nesting depth of 256 at offset 336 (in .../0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0)",
		},
		{
			name:    "not an object",
			doc:     `[]`,
			message: "invalid-tool-definition: invalid tool manifest: manifest must be object (got an array)",
			issues: []toolerr.Issue{
				{InstancePath: "", SchemaPath: "#/type", Keyword: "type", Params: map[string]any{"type": "object"}, Message: "must be object"},
			},
		},
		{
			name:    "missing required",
			doc:     `{"id":"t","version":"1.0.0","input":{}}`,
			message: "invalid-tool-definition: invalid tool manifest: manifest is missing the required property \"description\"; manifest is missing the required property \"output\"",
			issues: []toolerr.Issue{
				{InstancePath: "", SchemaPath: "#/required", Keyword: "required", Params: map[string]any{"missingProperty": "description"}, Message: "must have required property 'description'"},
				{InstancePath: "", SchemaPath: "#/required", Keyword: "required", Params: map[string]any{"missingProperty": "output"}, Message: "must have required property 'output'"},
			},
		},
		{
			name:    "bad version and extra properties",
			doc:     base(`"zeta":1,"alpha":2`),
			message: `invalid-tool-definition: invalid tool manifest: manifest has an unknown property "alpha"; manifest has an unknown property "zeta"`,
			issues: []toolerr.Issue{
				{InstancePath: "", SchemaPath: "#/additionalProperties", Keyword: "additionalProperties", Params: map[string]any{"additionalProperty": "alpha"}, Message: "must NOT have additional properties"},
				{InstancePath: "", SchemaPath: "#/additionalProperties", Keyword: "additionalProperties", Params: map[string]any{"additionalProperty": "zeta"}, Message: "must NOT have additional properties"},
			},
		},
		{
			name:    "bad version",
			doc:     `{"id":"t","description":"d","version":"v1","input":{},"output":{}}`,
			message: `invalid-tool-definition: invalid tool manifest: manifest/version must look like 1.0.0 (got "v1")`,
			issues: []toolerr.Issue{
				{InstancePath: "/version", SchemaPath: "#/properties/version/pattern", Keyword: "pattern", Params: map[string]any{"pattern": `^\d+\.\d+\.\d+$`}, Message: `must match pattern "^\d+\.\d+\.\d+$"`},
			},
		},
		{
			name:    "bad sandbox",
			doc:     base(`"sandbox":"paranoid"`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/sandbox must be one of \"none\", \"context-isolated\", \"strict\" (got \"paranoid\")",
			issues: []toolerr.Issue{
				{InstancePath: "/sandbox", SchemaPath: "#/properties/sandbox/enum", Keyword: "enum", Params: map[string]any{"allowedValues": []any{"none", "context-isolated", "strict"}}, Message: "must be equal to one of the allowed values"},
			},
		},
		{
			name:    "limits below minimum",
			doc:     base(`"limits":{"memMB":0,"cpuMs":1.5}`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/limits/cpuMs must be integer (got 1.5); manifest/limits/memMB must be >= 1",
			issues: []toolerr.Issue{
				{InstancePath: "/limits/cpuMs", SchemaPath: "#/properties/limits/properties/cpuMs/type", Keyword: "type", Params: map[string]any{"type": "integer"}, Message: "must be integer"},
				{InstancePath: "/limits/memMB", SchemaPath: "#/properties/limits/properties/memMB/minimum", Keyword: "minimum", Params: map[string]any{"comparison": ">=", "limit": json.Number("1")}, Message: "must be >= 1"},
			},
		},
		{
			name:    "limits beyond int64",
			doc:     base(`"limits":{"memMB":1e19,"cpuMs":1}`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/limits/memMB is out of range",
		},
		{
			name:    "network allowlist without hosts",
			doc:     base(`"network":{"kind":"allowlist"}`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/network is missing the required property \"hosts\"",
			issues: []toolerr.Issue{
				{InstancePath: "/network/kind", SchemaPath: "#/properties/network/oneOf/0/properties/kind/enum", Keyword: "enum", Params: map[string]any{"allowedValues": []any{"none", "unrestricted"}}, Message: "must be equal to one of the allowed values"},
				{InstancePath: "/network", SchemaPath: "#/properties/network/oneOf/1/required", Keyword: "required", Params: map[string]any{"missingProperty": "hosts"}, Message: "must have required property 'hosts'"},
				{InstancePath: "/network", SchemaPath: "#/properties/network/oneOf", Keyword: "oneOf", Params: map[string]any{"passingSchemas": nil}, Message: "must match exactly one schema in oneOf"},
			},
		},
		{
			name:    "artifact ref kind unknown",
			doc:     base(`"codeArtifactRef":{"kind":"http","modulePath":"x"}`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/codeArtifactRef/kind must be \"oci\" or \"filesystem\" (got \"http\")",
			issues: []toolerr.Issue{
				// Within a branch: the object's own keywords first, then its properties (Ajv's order).
				{InstancePath: "/codeArtifactRef", SchemaPath: "#/properties/codeArtifactRef/oneOf/0/required", Keyword: "required", Params: map[string]any{"missingProperty": "imageRef"}, Message: "must have required property 'imageRef'"},
				{InstancePath: "/codeArtifactRef", SchemaPath: "#/properties/codeArtifactRef/oneOf/0/required", Keyword: "required", Params: map[string]any{"missingProperty": "artifactVersion"}, Message: "must have required property 'artifactVersion'"},
				{InstancePath: "/codeArtifactRef/kind", SchemaPath: "#/properties/codeArtifactRef/oneOf/0/properties/kind/const", Keyword: "const", Params: map[string]any{"allowedValue": "oci"}, Message: "must be equal to constant"},
				{InstancePath: "/codeArtifactRef/kind", SchemaPath: "#/properties/codeArtifactRef/oneOf/1/properties/kind/const", Keyword: "const", Params: map[string]any{"allowedValue": "filesystem"}, Message: "must be equal to constant"},
				{InstancePath: "/codeArtifactRef", SchemaPath: "#/properties/codeArtifactRef/oneOf", Keyword: "oneOf", Params: map[string]any{"passingSchemas": nil}, Message: "must match exactly one schema in oneOf"},
			},
		},
		{
			name:    "spec through $ref",
			doc:     base(`"spec":{"kind":"http","method":"GET","urlTemplate":"u","authorization":{"kind":"bearer","secretRef":{"envName":"E"}}}`),
			message: "invalid-tool-definition: invalid tool manifest: manifest/spec/authorization/secretRef is missing the required property \"name\"",
			issues: []toolerr.Issue{
				{InstancePath: "/spec/authorization/secretRef", SchemaPath: "#/$defs/ToolSecretRef/required", Keyword: "required", Params: map[string]any{"missingProperty": "name"}, Message: "must have required property 'name'"},
				{InstancePath: "/spec/authorization", SchemaPath: "#/$defs/HttpAuthSpec/oneOf/1/required", Keyword: "required", Params: map[string]any{"missingProperty": "headerName"}, Message: "must have required property 'headerName'"},
				{InstancePath: "/spec/authorization/kind", SchemaPath: "#/$defs/HttpAuthSpec/oneOf/1/properties/kind/const", Keyword: "const", Params: map[string]any{"allowedValue": "header"}, Message: "must be equal to constant"},
				{InstancePath: "/spec/authorization/secretRef", SchemaPath: "#/$defs/ToolSecretRef/required", Keyword: "required", Params: map[string]any{"missingProperty": "name"}, Message: "must have required property 'name'"},
				{InstancePath: "/spec/authorization", SchemaPath: "#/$defs/HttpAuthSpec/oneOf", Keyword: "oneOf", Params: map[string]any{"passingSchemas": nil}, Message: "must match exactly one schema in oneOf"},
				{InstancePath: "/spec", SchemaPath: "#/properties/spec/oneOf", Keyword: "oneOf", Params: map[string]any{"passingSchemas": nil}, Message: "must match exactly one schema in oneOf"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.doc))
			if m != nil {
				t.Errorf("Parse returned a manifest with an error")
			}
			te := asToolErr(t, err, toolerr.InvalidToolDefinition)
			if te.Error() != tt.message {
				t.Errorf("message\n got %s\nwant %s", te.Error(), tt.message)
			}
			if tt.issues != nil {
				assertIssues(t, te.Issues, tt.issues)
			}
		})
	}
}

func asToolErr(t *testing.T, err error, code toolerr.Code) *toolerr.Error {
	t.Helper()
	var te *toolerr.Error
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want *toolerr.Error", err, err)
	}
	if te.Code != code || !errors.Is(err, code) {
		t.Fatalf("code = %s, want %s (%v)", te.Code, code, err)
	}
	return te
}

func assertIssues(t *testing.T, got, want []toolerr.Issue) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("issues\n got %s\nwant %s", g, w)
	}
}
