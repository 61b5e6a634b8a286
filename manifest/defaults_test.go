package manifest

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/sandboxd/sandboxd/toolerr"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		name, schema, input, want string
	}{
		{
			name:   "top level",
			schema: `{"properties":{"a":{"default":1},"b":{"default":"x"}}}`,
			input:  `{"b":"given"}`,
			want:   `{"a":1,"b":"given"}`,
		},
		{
			name:   "required with default passes",
			schema: `{"type":"object","required":["mode"],"properties":{"mode":{"enum":["fast","slow"],"default":"fast"}}}`,
			input:  `{}`,
			want:   `{"mode":"fast"}`,
		},
		{
			name:   "nested objects, present and just filled",
			schema: `{"properties":{"opts":{"type":"object","default":{},"properties":{"depth":{"default":3},"inner":{"default":{"k":true},"properties":{"z":{"default":null}}}}}}}`,
			input:  `{}`,
			want:   `{"opts":{"depth":3,"inner":{"k":true,"z":null}}}`,
		},
		{
			name:   "null and false are present",
			schema: `{"properties":{"a":{"default":1},"b":{"default":1}}}`,
			input:  `{"a":null,"b":false}`,
			want:   `{"a":null,"b":false}`,
		},
		{
			name:   "array items and prefixItems",
			schema: `{"properties":{"list":{"prefixItems":[{"properties":{"first":{"default":true}}}],"items":{"properties":{"n":{"default":0}}}}}}`,
			input:  `{"list":[{},{},{"n":5},7]}`,
			want:   `{"list":[{"first":true},{"n":0},{"n":5},7]}`,
		},
		{
			name:   "$ref and allOf",
			schema: `{"$ref":"#/$defs/base","allOf":[{"properties":{"b":{"default":2}}}],"properties":{"c":{"$ref":"#/$defs/base"}},"$defs":{"base":{"properties":{"a":{"default":1}}}}}`,
			input:  `{"c":{}}`,
			want:   `{"a":1,"b":2,"c":{"a":1}}`,
		},
		{
			name:   "$ref and allOf win over own properties, in order (Ajv)",
			schema: `{"allOf":[{"properties":{"a":{"default":"allOf0"}}},{"properties":{"a":{"default":"allOf1"}}}],"properties":{"a":{"default":"own"}}}`,
			input:  `{}`,
			want:   `{"a":"allOf0"}`,
		},
		{
			name:   "patternProperties and additionalProperties",
			schema: `{"patternProperties":{"^x":{"properties":{"p":{"default":1}}}},"additionalProperties":{"properties":{"q":{"default":2}}}}`,
			input:  `{"x1":{},"y":{}}`,
			want:   `{"x1":{"p":1},"y":{"q":2}}`,
		},
		{
			name:   "dependentSchemas",
			schema: `{"dependentSchemas":{"card":{"properties":{"currency":{"default":"EUR"}}}}}`,
			input:  `{"card":1}`,
			want:   `{"card":1,"currency":"EUR"}`,
		},
		{
			name:   "recursive schema",
			schema: `{"$ref":"#/$defs/node","$defs":{"node":{"properties":{"w":{"default":1},"kids":{"items":{"$ref":"#/$defs/node"}}}}}}`,
			input:  `{"kids":[{"kids":[{}]}]}`,
			want:   `{"kids":[{"kids":[{"w":1}],"w":1}],"w":1}`,
		},
		{
			name:   "numbers keep their precision, no HTML escaping",
			schema: `{"properties":{"big":{"default":12345678901234567890123},"s":{"default":"<a&b>"}}}`,
			input:  `{"f":1.10,"n":1e400}`,
			want:   `{"big":12345678901234567890123,"f":1.10,"n":1e400,"s":"<a&b>"}`,
		},
		{
			name:   "repeated key: re-encoded with the validated value",
			schema: `{}`,
			input:  `{"a":1,"a":2}`,
			want:   `{"a":2}`,
		},
		{
			name:   "invalid UTF-8: re-encoded as validated",
			schema: `{}`,
			input:  "\"a\xffb\"",
			want:   `"a` + "\ufffd" + `b"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := mustLoad(t, tt.schema)
			out, err := tool.ValidateInput([]byte(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("ValidateInput = %s\n                 want %s", out, tt.want)
			}
		})
	}
}

func TestDefaultsNotInCompositeRules(t *testing.T) {
	for _, kw := range []string{
		`"anyOf":[{"properties":{"a":{"default":1}}}]`,
		`"oneOf":[{"properties":{"a":{"default":1}}}]`,
		`"not":{"properties":{"a":{"default":1}},"required":["zzz"]}`,
		`"if":{"properties":{"a":{"default":1}}}`,
		`"if":true,"then":{"properties":{"a":{"default":1}}}`,
		`"if":false,"else":{"properties":{"a":{"default":1}}}`,
	} {
		tool := mustLoad(t, `{`+kw+`}`)
		in := []byte(`{}`)
		out, err := tool.ValidateInput(in)
		if err != nil || string(out) != `{}` {
			t.Errorf("%s: ValidateInput = %s, %v; want {}", kw, out, err)
		}
	}
}

func TestDefaultsReturnSameSliceWhenNothingFilled(t *testing.T) {
	for _, schema := range []string{
		`{}`,
		`{"properties":{"a":{"default":1}}}`,
		`{"properties":{"o":{"properties":{"x":{"default":1}}}}}`,
	} {
		tool := mustLoad(t, schema)
		in := []byte(` {"a" : 2, "o": 5} `)
		out, err := tool.ValidateInput(in)
		if err != nil {
			t.Fatal(err)
		}
		if unsafe.SliceData(out) != unsafe.SliceData(in) || len(out) != len(in) {
			t.Errorf("%s: ValidateInput returned a copy %q, want the input slice", schema, out)
		}
	}
}

func TestDefaultsFilledBeforeValidation(t *testing.T) {
	// The default itself breaks the schema: the error names it.
	tool := mustLoad(t, `{"properties":{"n":{"type":"integer","default":"seven"}}}`)
	_, err := tool.ValidateInput([]byte(`{}`))
	te := asToolErr(t, err, toolerr.InputValidationFailed)
	assertIssues(t, te.Issues, []toolerr.Issue{iss("/n", "#/properties/n/type", "type", P{"type": "integer"}, "must be integer")})
}

func TestDefaultsDoNotAliasSchema(t *testing.T) {
	tool := mustLoad(t, `{"properties":{"o":{"default":{"list":[1]},"properties":{"list":{"items":{}}}},"p":{"default":{"k":{}},"properties":{"k":{"properties":{"x":{"default":1}}}}}}}`)
	for range 3 {
		out, err := tool.ValidateInput([]byte(`{}`))
		if err != nil || string(out) != `{"o":{"list":[1]},"p":{"k":{"x":1}}}` {
			t.Fatalf("ValidateInput = %s, %v", out, err)
		}
	}
}

func TestDefaultsRunawayRecursionStops(t *testing.T) {
	// Each filled default triggers another one: Ajv overflows its stack.
	tool := mustLoad(t, `{"$ref":"#/$defs/n","$defs":{"n":{"properties":{"next":{"$ref":"#/$defs/n","default":{}}}}}}`)
	out, err := tool.ValidateInput([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), `"next"`); got != maxDefaultNesting {
		t.Errorf("filled %d levels, want %d", got, maxDefaultNesting)
	}
}

func BenchmarkValidateInput(b *testing.B) {
	tool := mustLoad(b, `{"type":"object","required":["q"],"properties":{
		"q":{"type":"string","minLength":1},
		"limit":{"type":"integer","minimum":1,"maximum":100},
		"filters":{"type":"array","items":{"type":"object","properties":{"k":{"type":"string"},"v":{}}}}}}`)
	in := []byte(`{"q":"hello","limit":10,"filters":[{"k":"a","v":1},{"k":"b","v":[1,2,3]}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.ValidateInput(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateInputDefaults(b *testing.B) {
	tool := mustLoad(b, `{"type":"object","properties":{
		"q":{"type":"string","default":""},
		"opts":{"type":"object","default":{},"properties":{"depth":{"type":"integer","default":3}}}}}`)
	in := []byte(`{"q":"hello"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.ValidateInput(in); err != nil {
			b.Fatal(err)
		}
	}
}
