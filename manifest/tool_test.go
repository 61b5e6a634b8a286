package manifest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// manifestWith returns a valid manifest with the given input schema and
// extra top-level members.
func manifestWith(input string, extra ...string) []byte {
	s := `{"id":"t","description":"d","version":"1.0.0","input":` + input + `,"output":{}`
	for _, e := range extra {
		s += "," + e
	}
	return []byte(s + "}")
}

func mustLoad(t testing.TB, input string, extra ...string) *Tool {
	t.Helper()
	tool, err := Load(manifestWith(input, extra...))
	if err != nil {
		t.Fatalf("Load(%s): %v", input, err)
	}
	return tool
}

func TestLoadSchemaErrors(t *testing.T) {
	deepProps := strings.Repeat(`{"properties":{"a":`, 100) + `{}` + strings.Repeat(`}}`, 100)
	var wide strings.Builder
	wide.WriteString(`{"properties":{`)
	for i := range maxSchemaNodes {
		if i > 0 {
			wide.WriteString(",")
		}
		fmt.Fprintf(&wide, `"p%d":{}`, i)
	}
	wide.WriteString(`}}`)
	var laughs []string
	laughs = append(laughs, `"a0":{"type":"string"}`)
	for i := 1; i <= 25; i++ {
		laughs = append(laughs, fmt.Sprintf(`"a%d":{"allOf":[{"$ref":"#/$defs/a%d"},{"$ref":"#/$defs/a%d"}]}`, i, i-1, i-1))
	}

	tests := []struct {
		name    string
		input   string
		extra   []string
		output  bool // the problem is in the output schema
		pointer string
		message string // substring of the message after the pointer
	}{
		{name: "bad type", input: `{"type":"strin"}`, pointer: "/input/type", message: "must be equal to one of the allowed values"},
		{name: "nested bad type", input: `{"properties":{"a b":{"items":{"type":7}}}}`, pointer: "/input/properties/a b/items/type", message: "must be equal to one of the allowed values"},
		{name: "negative minLength", input: `{"minLength":-1}`, pointer: "/input/minLength", message: "must be >= 0"},
		{name: "bad regex", input: `{"pattern":"(?<=a)"}`, pointer: "/input/pattern", message: `must match format "regex"`},
		{name: "remote ref", input: `{"$ref":"https://example.com/s.json"}`, pointer: "/input/$ref", message: `reference "https://example.com/s.json" cannot be resolved: remote references are not fetched`},
		{name: "file ref", input: `{"properties":{"x":{"$ref":"file:///etc/passwd"}}}`, pointer: "/input/properties/x/$ref", message: "remote references are not fetched"},
		{name: "relative ref", input: `{"items":{"$ref":"other.json#/a"}}`, pointer: "/input/items/$ref", message: "remote references are not fetched"},
		{name: "ref under $id", input: `{"$id":"https://example.com/root.json","properties":{"x":{"$ref":"defs.json"}}}`, pointer: "/input/properties/x/$ref", message: `reference "https://example.com/defs.json" cannot be resolved`},
		{name: "dangling pointer", input: `{"$ref":"#/$defs/missing"}`, pointer: "/input/$ref", message: `reference "#/$defs/missing" does not resolve`},
		{name: "dangling anchor", input: `{"properties":{"a":{"$ref":"#nope"}}}`, pointer: "/input/properties/a/$ref", message: `reference "#nope" does not resolve: anchor not found`},
		{name: "duplicate anchor", input: `{"$defs":{"a":{"$anchor":"x"},"b":{"$anchor":"x"}}}`, pointer: "/input/$defs/", message: `duplicate anchor "x"`},
		{name: "draft-07 without mcp", input: `{"$schema":"http://json-schema.org/draft-07/schema#"}`, pointer: "/input/$schema", message: `tool schemas must be JSON Schema draft 2020-12 (other dialects only with transport "mcp")`},
		{name: "custom metaschema", input: `{"$schema":"https://example.com/meta"}`, extra: []string{`"transport":"mcp"`}, pointer: "/input/$schema", message: "is not a supported dialect"},
		{name: "draft-04 with mcp", input: `{"$schema":"http://json-schema.org/draft-04/schema#"}`, extra: []string{`"transport":"mcp"`}, pointer: "/input/$schema", message: "is not a supported dialect"},
		{name: "$schema not a string", input: `{"$schema":1}`, pointer: "/input/$schema", message: "$schema must be a string"},
		{name: "too large", input: wide.String(), pointer: "/input", message: "schema is too large"},
		{name: "too complex", input: `{"$ref":"#/$defs/a25","$defs":{` + strings.Join(laughs, ",") + `}}`, pointer: "/input", message: "schema is too complex"},
		{name: "count beyond int", input: `{"properties":{"s":{"maxLength":18446744073709551616}}}`, pointer: "/input/properties/s/maxLength", message: "value is too large"},
		{name: "count keyword as data is fine", input: `{"const":{"maxLength":1e30}}`, pointer: ""},
		{name: "ref cycle", input: `{"$ref":"#/$defs/a","$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}}}`, pointer: "/input/$defs/a", message: "reference cycle"},
		{name: "self ref in anyOf", input: `{"anyOf":[{"type":"string"},{"$ref":"#"}]}`, pointer: "/input", message: "reference cycle"},
		{name: "recursion through items is fine", input: `{"$defs":{"n":{"items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`, pointer: ""},
		{name: "output schema", input: `{}`, extra: nil, output: true, pointer: "/output/required", message: "must be array"},
		{name: "deep but fine", input: deepProps, pointer: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := manifestWith(tt.input, tt.extra...)
			if tt.output {
				doc = []byte(strings.Replace(string(doc), `"output":{}`, `"output":{"required":"x"}`, 1))
			}
			tool, err := Load(doc)
			if tt.pointer == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if tool != nil {
				t.Error("Load returned a tool with an error")
			}
			te := asToolErr(t, err, toolerr.InvalidToolDefinition)
			ptr, _ := te.Details["pointer"].(string)
			if !strings.HasPrefix(ptr, tt.pointer) {
				t.Errorf("Details[pointer] = %q, want %q", ptr, tt.pointer)
			}
			if !strings.Contains(te.Message, " at "+ptr+": ") || !strings.Contains(te.Message, tt.message) {
				t.Errorf("message %q, want it to name %q and contain %q", te.Message, ptr, tt.message)
			}
			if te.ToolID != "t" {
				t.Errorf("ToolID = %q", te.ToolID)
			}
		})
	}
}

func TestLoadSchemaErrorIssues(t *testing.T) {
	_, err := Load(manifestWith(`{"properties":{"a":{"type":"strin"}}}`))
	te := asToolErr(t, err, toolerr.InvalidToolDefinition)
	if te.Message != "schema /input is invalid at /input/properties/a/type: must be equal to one of the allowed values" {
		t.Errorf("message = %q", te.Message)
	}
	const meta = "https://json-schema.org/draft/2020-12/meta/validation"
	assertIssues(t, te.Issues, []toolerr.Issue{
		{InstancePath: "/input/properties/a/type", SchemaPath: meta + "#/$defs/simpleTypes/enum", Keyword: "enum",
			Params:  map[string]any{"allowedValues": []any{"array", "boolean", "integer", "null", "number", "object", "string"}},
			Message: "must be equal to one of the allowed values"},
		{InstancePath: "/input/properties/a/type", SchemaPath: meta + "#/properties/type/anyOf/1/type", Keyword: "type",
			Params: map[string]any{"type": "array"}, Message: "must be array"},
		{InstancePath: "/input/properties/a/type", SchemaPath: meta + "#/properties/type/anyOf", Keyword: "anyOf",
			Params: map[string]any{}, Message: "must match a schema in anyOf"},
	})
}

func TestLoadMCPDialects(t *testing.T) {
	tests := []struct {
		schema, input string
		valid         bool
	}{
		// draft-07: exclusiveMinimum is a number, items may be an array.
		{`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}],"additionalItems":false}`, `["a"]`, true},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}],"additionalItems":false}`, `["a",1]`, false},
		{`{"$schema":"http://json-schema.org/draft-06/schema#","exclusiveMinimum":1}`, `1`, false},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","dependentRequired":{"a":["b"]}}`, `{"a":1}`, false},
		// 2020-12 semantics when $schema is absent: items is one schema.
		{`{"prefixItems":[{"type":"string"}],"items":false}`, `["a",1]`, false},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer"}`, `2`, true},
	}
	for _, tt := range tests {
		tool := mustLoad(t, tt.schema, `"transport":"mcp"`)
		_, err := tool.ValidateInput([]byte(tt.input))
		if (err == nil) != tt.valid {
			t.Errorf("%s with %s: err = %v, want valid=%v", tt.schema, tt.input, err, tt.valid)
		}
	}
	// Without transport mcp, the same draft-07 schema is refused.
	if _, err := Load(manifestWith(tests[0].schema)); err == nil {
		t.Error("draft-07 schema accepted without transport mcp")
	}
	// draft-07 errors still come out Ajv-shaped.
	tool := mustLoad(t, tests[0].schema, `"transport":"mcp"`)
	_, err := tool.ValidateInput([]byte(`["a",1,2]`))
	assertIssues(t, asToolErr(t, err, toolerr.InputValidationFailed).Issues, []toolerr.Issue{
		{InstancePath: "", SchemaPath: "#/additionalItems", Keyword: "additionalItems", Params: map[string]any{"limit": 1}, Message: "must NOT have more than 1 items"},
	})
}

func TestMetaschemaRefNeedsNoFetch(t *testing.T) {
	// The JSON Schema metaschemas are built in: referencing one fetches nothing.
	tool := mustLoad(t, `{"properties":{"s":{"$ref":"https://json-schema.org/draft/2020-12/schema"}}}`)
	if _, err := tool.ValidateInput([]byte(`{"s":{"type":"string"}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := tool.ValidateInput([]byte(`{"s":{"type":"strin"}}`))
	asToolErr(t, err, toolerr.InputValidationFailed)
}

func TestValidateInputNotJSON(t *testing.T) {
	tool := mustLoad(t, `{}`)
	for _, in := range []string{``, `{`, `{} {}`, `nope`, strings.Repeat("[", maxDepth+1)} {
		out, err := tool.ValidateInput([]byte(in))
		if out != nil {
			t.Errorf("%q: output %q with an error", in, out)
		}
		te := asToolErr(t, err, toolerr.InputValidationFailed)
		if !strings.HasPrefix(te.Message, "input is not valid JSON: ") && !strings.HasPrefix(te.Message, "input is refused: ") {
			t.Errorf("%q: message %q", in, te.Message)
		}
		if len(te.Issues) != 1 || te.Issues[0].Message != te.Message || te.Issues[0].InstancePath != "" || te.Issues[0].Params == nil {
			t.Errorf("%q: issues %+v", in, te.Issues)
		}
		if te.ToolID != "t" {
			t.Errorf("ToolID = %q", te.ToolID)
		}
	}
}

func TestValidateOutput(t *testing.T) {
	tool, err := Load([]byte(`{"id":"t","description":"d","version":"1.0.0","input":{},
		"output":{"type":"object","required":["ok"],"properties":{"ok":{"type":"boolean","default":true}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tool.ValidateOutput([]byte(" \n{\"ok\":false}\r\n\t"))
	if err != nil || string(got) != `{"ok":false}` {
		t.Errorf("ValidateOutput = %q, %v", got, err)
	}
	// No defaults for outputs.
	_, err = tool.ValidateOutput([]byte(`{}`))
	te := asToolErr(t, err, toolerr.OutputValidationFailed)
	if te.Message != "output must have required property 'ok'" {
		t.Errorf("message %q", te.Message)
	}
	assertIssues(t, te.Issues, []toolerr.Issue{
		{InstancePath: "", SchemaPath: "#/required", Keyword: "required", Params: map[string]any{"missingProperty": "ok"}, Message: "must have required property 'ok'"},
	})
	_, err = tool.ValidateOutput([]byte(`{"ok":tru}`))
	te = asToolErr(t, err, toolerr.OutputValidationFailed)
	if !strings.HasPrefix(te.Message, "output is not valid JSON: ") {
		t.Errorf("message %q", te.Message)
	}
}

func TestCompileSchema(t *testing.T) {
	s, err := CompileSchema("/needsSpec/env/REGION", json.RawMessage(`{"type":"string","enum":["eu","us"]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, issues, err := s.Validate([]byte(`"eu"`), true)
	if err != nil || issues != nil || string(out) != `"eu"` {
		t.Errorf("Validate = %q %v %v", out, issues, err)
	}
	_, issues, err = s.Validate([]byte(`"mars"`), false)
	if err != nil {
		t.Fatal(err)
	}
	assertIssues(t, issues, []toolerr.Issue{
		{InstancePath: "", SchemaPath: "#/enum", Keyword: "enum", Params: map[string]any{"allowedValues": []any{"eu", "us"}}, Message: "must be equal to one of the allowed values"},
	})
	if _, _, err := s.Validate([]byte(`eu`), false); err == nil {
		t.Error("Validate accepted non-JSON")
	}

	for _, tt := range []struct{ raw, pointer string }{
		{`{"type":1}`, "/needsSpec/config/x/type"},
		{`{"type":`, "/needsSpec/config/x"},
		{`{"a":1,"a":2}`, "/needsSpec/config/x"},
		{`{"$schema":"http://json-schema.org/draft-07/schema#"}`, "/needsSpec/config/x/$schema"},
	} {
		_, err := CompileSchema("/needsSpec/config/x", json.RawMessage(tt.raw))
		te := asToolErr(t, err, toolerr.InvalidToolDefinition)
		if te.Details["pointer"] != tt.pointer || !strings.Contains(te.Message, tt.pointer) {
			t.Errorf("%s: pointer %v, message %q, want %s", tt.raw, te.Details["pointer"], te.Message, tt.pointer)
		}
	}
}

// TestToolConcurrent hammers one Tool from many goroutines (run with -race).
func TestToolConcurrent(t *testing.T) {
	tool := mustLoad(t, `{"type":"object","required":["n"],"properties":{
		"n":{"type":"integer","minimum":0},
		"opts":{"type":"object","default":{},"properties":{"v":{"type":"boolean","default":true}}},
		"tags":{"type":"array","uniqueItems":true,"items":{"type":"string","pattern":"^[a-z]+$"}}}}`)
	var failed [8]bool // goroutine g's, so that it stops at its first failure
	sandboxtest.Hammer(t, 8, 200, func(g, i int) {
		if failed[g] {
			return
		}
		n := g*1000 + i
		out, err := tool.ValidateInput(fmt.Appendf(nil, `{"n":%d,"tags":["a","b"]}`, n))
		want := fmt.Sprintf(`{"n":%d,"opts":{"v":true},"tags":["a","b"]}`, n)
		if err != nil || string(out) != want {
			t.Errorf("ValidateInput = %s, %v; want %s", out, err, want)
			failed[g] = true
			return
		}
		_, err = tool.ValidateInput(fmt.Appendf(nil, `{"n":-%d,"tags":["a","a","B"]}`, n+1))
		te, ok := err.(*toolerr.Error)
		if !ok || len(te.Issues) != 3 {
			t.Errorf("ValidateInput(bad) = %v", err)
			failed[g] = true
			return
		}
		if _, err := tool.ValidateOutput([]byte(`{"any":"thing"}`)); err != nil {
			t.Error(err)
			failed[g] = true
		}
	})
}

func BenchmarkLoad(b *testing.B) {
	data := []byte(fullManifest)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(data); err != nil {
			b.Fatal(err)
		}
	}
}
