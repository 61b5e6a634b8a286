package manifest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

// FuzzParse feeds arbitrary bytes to Parse and, when they parse, to Load:
// never a panic (also none swallowed by Load's recover), always
// invalid-tool-definition on failure.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullManifest))
	f.Add(manifestWith(`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string","default":"d"}}}`))
	f.Add(manifestWith(`{"$ref":"https://example.com/x"}`))
	f.Add(manifestWith(`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{}]}`, `"transport":"mcp"`))
	f.Add(manifestWith(`{"patternProperties":{"^a(":{}}}`))
	f.Add([]byte(base(`"network":{"kind":"allowlist","hosts":["a"]},"limits":{"memMB":1e3,"cpuMs":1}`)))
	for _, c := range equivCorpus[:10] {
		f.Add([]byte(corpusDoc(c.doc)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			checkCode(t, err, toolerr.InvalidToolDefinition)
			return
		}
		if m.ID == "" || m.Input == nil || m.Output == nil || !bytes.Equal(m.Raw, data) {
			t.Fatalf("Parse accepted %q into %+v", data, m)
		}
		tool, err := Load(data)
		if err != nil {
			te := checkCode(t, err, toolerr.InvalidToolDefinition)
			if strings.Contains(te.Message, "schema could not be compiled") {
				t.Fatalf("Load panicked on %q: %v", data, err)
			}
			return
		}
		if _, err := tool.ValidateInput([]byte(`{}`)); err != nil {
			checkCode(t, err, toolerr.InputValidationFailed)
		}
	})
}

// FuzzValidateInput feeds arbitrary bytes to ValidateInput of a tool using
// many keywords and defaults: never a panic, the right code on failure, and
// on success a JSON document that validates again to itself.
func FuzzValidateInput(f *testing.F) {
	tool, err := Load(manifestWith(`{
		"type":"object","required":["q"],"additionalProperties":false,
		"properties":{
			"q":{"type":"string","minLength":1,"maxLength":50,"pattern":"^[^<]*$"},
			"n":{"type":"integer","minimum":0,"exclusiveMaximum":1e6,"multipleOf":3,"default":3},
			"when":{"type":"string","format":"date-time"},
			"tags":{"type":"array","uniqueItems":true,"maxItems":5,"items":{"enum":["a","b","c"]}},
			"opt":{"type":"object","default":{},"properties":{"deep":{"$ref":"#/$defs/deep"}},"dependentRequired":{"x":["y"]}},
			"pick":{"oneOf":[{"const":1},{"type":"string"}]},
			"any":{"anyOf":[{"type":"null"},{"type":"array","prefixItems":[{"type":"boolean"}],"items":false}]},
			"not":{"not":{"type":"number"}}
		},
		"$defs":{"deep":{"type":"object","properties":{"v":{"default":[1,{"x":null}]},"next":{"$ref":"#/$defs/deep"}}}}
	}`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"q":"x"}`, `{"q":""}`, `{}`, `{"q":"a","n":4,"tags":["a","a"]}`, `{"q":"a","opt":{"deep":{"next":{}}}}`,
		`{"q":"a","pick":1,"any":[true,1],"not":1,"when":"2024-01-01T00:00:00Z"}`, `[1,2]`, `{"q":"a","q":"b"}`,
		"\"\xff\"", `{"q":"a","n":1e9999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := tool.ValidateInput(data)
		if err != nil {
			te := checkCode(t, err, toolerr.InputValidationFailed)
			if len(te.Issues) == 0 {
				t.Fatalf("%q: no issues", data)
			}
			for _, is := range te.Issues {
				if is.Params == nil || is.Message == "" {
					t.Fatalf("%q: malformed issue %+v", data, is)
				}
			}
			return
		}
		again, err := tool.ValidateInput(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q -> %q -> %q, %v", data, out, again, err)
		}
	})
}

func checkCode(t *testing.T, err error, code toolerr.Code) *toolerr.Error {
	t.Helper()
	var te *toolerr.Error
	if !errors.As(err, &te) || te.Code != code {
		t.Fatalf("err = %v, want a %s *toolerr.Error", err, code)
	}
	return te
}

// FuzzLoadSchema fuzzes the input schema of a manifest (the compile path
// and validation with defaults).
func FuzzLoadSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"default":1}}}`,
		`{"$ref":"#/$defs/a","$defs":{"a":{"items":{"$ref":"#/$defs/a"},"default":[]}}}`,
		`{"allOf":[{"$ref":"#"}]}`,
		`{"$id":"http://x/y","$ref":"z"}`,
		`{"prefixItems":[{"default":{}}],"items":false,"uniqueItems":true}`,
		`{"$dynamicAnchor":"n","properties":{"k":{"$dynamicRef":"#n"}}}`,
		`{"patternProperties":{"^[":{}}}`,
		`{"dependentSchemas":{"a":{"properties":{"b":{"default":2}}}},"unevaluatedProperties":false}`,
		`{"if":{"required":["a"]},"then":{"minProperties":2},"else":{"const":{}}}`,
		`{"contains":{"type":"null"},"minContains":2,"maxContains":3}`,
	} {
		f.Add([]byte(s))
	}
	inputs := [][]byte{[]byte(`{}`), []byte(`{"a":[1,{"b":null}],"k":{"k":{}}}`), []byte(`[null,null,{}]`), []byte(`"s"`), []byte(`7.5`)}
	f.Fuzz(func(t *testing.T, schema []byte) {
		tool, err := Load(manifestWith(string(schema)))
		if err != nil {
			te := checkCode(t, err, toolerr.InvalidToolDefinition)
			if strings.Contains(te.Message, "schema could not be compiled") {
				t.Fatalf("Load panicked on %q: %v", schema, err)
			}
			return
		}
		for _, in := range inputs {
			out, err := tool.ValidateInput(in)
			if err != nil {
				te := checkCode(t, err, toolerr.InputValidationFailed)
				if strings.Contains(te.Message, "validation failed: ") {
					t.Fatalf("validation panicked: %v", err)
				}
				continue
			}
			if _, err := decodeJSON(out, decodeOpts{}); err != nil {
				t.Fatalf("ValidateInput returned non-JSON %q", out)
			}
		}
	})
}
