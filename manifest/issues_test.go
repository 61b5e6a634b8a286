package manifest

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

type P = map[string]any

func TestAjvIssues(t *testing.T) {
	tests := []struct {
		name, schema, input string
		want                []toolerr.Issue
	}{
		{
			name:   "required at the parent, one per property",
			schema: `{"properties":{"a":{"type":"object","required":["x","y"]}}}`,
			input:  `{"a":{}}`,
			want: []toolerr.Issue{
				iss("/a", "#/properties/a/required", "required", P{"missingProperty": "x"}, "must have required property 'x'"),
				iss("/a", "#/properties/a/required", "required", P{"missingProperty": "y"}, "must have required property 'y'"),
			},
		},
		{
			name:   "additionalProperties one per property, sorted",
			schema: `{"properties":{"a":{}},"additionalProperties":false}`,
			input:  `{"z":1,"a":1,"b":2}`,
			want: []toolerr.Issue{
				iss("", "#/additionalProperties", "additionalProperties", P{"additionalProperty": "b"}, "must NOT have additional properties"),
				iss("", "#/additionalProperties", "additionalProperties", P{"additionalProperty": "z"}, "must NOT have additional properties"),
			},
		},
		{
			name:   "type",
			schema: `{"items":{"type":"string"}}`,
			input:  `["a",1]`,
			want:   []toolerr.Issue{iss("/1", "#/items/type", "type", P{"type": "string"}, "must be string")},
		},
		{
			name:   "type list in schema order",
			schema: `{"type":["string","null"]}`,
			input:  `1`,
			want:   []toolerr.Issue{iss("", "#/type", "type", P{"type": []string{"string", "null"}}, "must be string,null")},
		},
		{
			name:   "integer",
			schema: `{"type":"integer"}`,
			input:  `1.5`,
			want:   []toolerr.Issue{iss("", "#/type", "type", P{"type": "integer"}, "must be integer")},
		},
		{
			name:   "enum",
			schema: `{"enum":[1,"a",null,{"b":2}]}`,
			input:  `2`,
			want: []toolerr.Issue{iss("", "#/enum", "enum", P{"allowedValues": []any{json.Number("1"), "a", nil, map[string]any{"b": json.Number("2")}}},
				"must be equal to one of the allowed values")},
		},
		{
			name:   "const",
			schema: `{"const":{"a":[1]}}`,
			input:  `{"a":[2]}`,
			want:   []toolerr.Issue{iss("", "#/const", "const", P{"allowedValue": map[string]any{"a": []any{json.Number("1")}}}, "must be equal to constant")},
		},
		{
			name:   "minimum and maximum",
			schema: `{"properties":{"lo":{"minimum":3},"hi":{"maximum":0.5},"xlo":{"exclusiveMinimum":0},"xhi":{"exclusiveMaximum":1e21}}}`,
			input:  `{"lo":2,"hi":0.75,"xlo":0,"xhi":2e21}`,
			want: []toolerr.Issue{
				iss("/hi", "#/properties/hi/maximum", "maximum", P{"comparison": "<=", "limit": json.Number("0.5")}, "must be <= 0.5"),
				iss("/lo", "#/properties/lo/minimum", "minimum", P{"comparison": ">=", "limit": json.Number("3")}, "must be >= 3"),
				iss("/xhi", "#/properties/xhi/exclusiveMaximum", "exclusiveMaximum", P{"comparison": "<", "limit": json.Number("1e+21")}, "must be < 1e+21"),
				iss("/xlo", "#/properties/xlo/exclusiveMinimum", "exclusiveMinimum", P{"comparison": ">", "limit": json.Number("0")}, "must be > 0"),
			},
		},
		{
			name:   "string lengths count code points",
			schema: `{"prefixItems":[{"minLength":2},{"maxLength":1}]}`,
			input:  `["a","é😀"]`,
			want: []toolerr.Issue{
				iss("/0", "#/prefixItems/0/minLength", "minLength", P{"limit": 2}, "must NOT have fewer than 2 characters"),
				iss("/1", "#/prefixItems/1/maxLength", "maxLength", P{"limit": 1}, "must NOT have more than 1 characters"),
			},
		},
		{
			name:   "item and property counts",
			schema: `{"properties":{"a":{"minItems":2},"b":{"maxItems":0},"c":{"minProperties":1},"d":{"maxProperties":1}}}`,
			input:  `{"a":[1],"b":[1],"c":{},"d":{"x":1,"y":2}}`,
			want: []toolerr.Issue{
				iss("/a", "#/properties/a/minItems", "minItems", P{"limit": 2}, "must NOT have fewer than 2 items"),
				iss("/b", "#/properties/b/maxItems", "maxItems", P{"limit": 0}, "must NOT have more than 0 items"),
				iss("/c", "#/properties/c/minProperties", "minProperties", P{"limit": 1}, "must NOT have fewer than 1 properties"),
				iss("/d", "#/properties/d/maxProperties", "maxProperties", P{"limit": 1}, "must NOT have more than 1 properties"),
			},
		},
		{
			name:   "pattern",
			schema: `{"pattern":"^a"}`,
			input:  `"ba"`,
			want:   []toolerr.Issue{iss("", "#/pattern", "pattern", P{"pattern": "^a"}, `must match pattern "^a"`)},
		},
		{
			name:   "format is asserted",
			schema: `{"properties":{"at":{"format":"date-time"},"to":{"format":"email"},"n":{"format":"email"}}}`,
			input:  `{"at":"yesterday","to":"nobody","n":5}`,
			want: []toolerr.Issue{
				iss("/at", "#/properties/at/format", "format", P{"format": "date-time"}, `must match format "date-time"`),
				iss("/to", "#/properties/to/format", "format", P{"format": "email"}, `must match format "email"`),
			},
		},
		{
			name:   "multipleOf",
			schema: `{"items":{"multipleOf":0.01}}`,
			input:  `[0.02,0.015]`,
			want:   []toolerr.Issue{iss("/1", "#/items/multipleOf", "multipleOf", P{"multipleOf": json.Number("0.01")}, "must be multiple of 0.01")},
		},
		{
			name:   "uniqueItems reports Ajv's pair",
			schema: `{"uniqueItems":true}`,
			input:  `[1,2,1,2.0,3]`,
			want:   []toolerr.Issue{iss("", "#/uniqueItems", "uniqueItems", P{"i": 3, "j": 1}, "must NOT have duplicate items (items ## 1 and 3 are identical)")},
		},
		{
			name:   "oneOf none matched",
			schema: `{"oneOf":[{"type":"string"},{"type":"integer","minimum":5}]}`,
			input:  `3`,
			want: []toolerr.Issue{
				iss("", "#/oneOf/0/type", "type", P{"type": "string"}, "must be string"),
				iss("", "#/oneOf/1/minimum", "minimum", P{"comparison": ">=", "limit": json.Number("5")}, "must be >= 5"),
				iss("", "#/oneOf", "oneOf", P{"passingSchemas": nil}, "must match exactly one schema in oneOf"),
			},
		},
		{
			name:   "oneOf two matched",
			schema: `{"oneOf":[{"type":"string"},{"type":"number"},{"type":"integer"}]}`,
			input:  `3`,
			want:   []toolerr.Issue{iss("", "#/oneOf", "oneOf", P{"passingSchemas": []int{1, 2}}, "must match exactly one schema in oneOf")},
		},
		{
			name:   "anyOf",
			schema: `{"anyOf":[{"type":"string"},{"type":"boolean"}]}`,
			input:  `3`,
			want: []toolerr.Issue{
				iss("", "#/anyOf/0/type", "type", P{"type": "string"}, "must be string"),
				iss("", "#/anyOf/1/type", "type", P{"type": "boolean"}, "must be boolean"),
				iss("", "#/anyOf", "anyOf", P{}, "must match a schema in anyOf"),
			},
		},
		{
			name:   "not",
			schema: `{"not":{"type":"string"}}`,
			input:  `"s"`,
			want:   []toolerr.Issue{iss("", "#/not", "not", P{}, "must NOT be valid")},
		},
		{
			name:   "allOf adds no issue of its own",
			schema: `{"allOf":[{"minimum":2},{"maximum":0}]}`,
			input:  `1`,
			want: []toolerr.Issue{
				iss("", "#/allOf/0/minimum", "minimum", P{"comparison": ">=", "limit": json.Number("2")}, "must be >= 2"),
				iss("", "#/allOf/1/maximum", "maximum", P{"comparison": "<=", "limit": json.Number("0")}, "must be <= 0"),
			},
		},
		{
			name:   "dependentRequired",
			schema: `{"dependentRequired":{"card":["name","cvv"]}}`,
			input:  `{"card":1,"name":"x"}`,
			want: []toolerr.Issue{iss("", "#/dependentRequired", "dependentRequired",
				P{"property": "card", "missingProperty": "cvv", "depsCount": 2, "deps": "name, cvv"},
				"must have properties name, cvv when property card is present")},
		},
		{
			name:   "propertyNames",
			schema: `{"propertyNames":{"maxLength":3}}`,
			input:  `{"ok":1,"toolong":2}`,
			want: []toolerr.Issue{
				iss("", "#/propertyNames/maxLength", "maxLength", P{"limit": 3}, "must NOT have more than 3 characters"),
				iss("", "#/propertyNames", "propertyNames", P{"propertyName": "toolong"}, "property name must be valid"),
			},
		},
		{
			name:   "contains",
			schema: `{"contains":{"type":"string"}}`,
			input:  `[1]`,
			want: []toolerr.Issue{
				iss("/0", "#/contains/type", "type", P{"type": "string"}, "must be string"),
				iss("", "#/contains", "contains", P{"minContains": 1}, "must contain at least 1 valid item(s)"),
			},
		},
		{
			name:   "maxContains",
			schema: `{"contains":{"type":"string"},"maxContains":1}`,
			input:  `["a","b"]`,
			want:   []toolerr.Issue{iss("", "#/contains", "contains", P{"minContains": 1, "maxContains": 1}, "must contain at least 1 and no more than 1 valid item(s)")},
		},
		{
			name:   "false schema",
			schema: `{"properties":{"gone":false}}`,
			input:  `{"gone":1}`,
			want:   []toolerr.Issue{iss("/gone", "#/properties/gone/false schema", "false schema", P{}, "boolean schema is false")},
		},
		{
			name:   "items false after prefixItems, once",
			schema: `{"prefixItems":[{},{}],"items":false}`,
			input:  `[1,2,3,4]`,
			want:   []toolerr.Issue{iss("", "#/items", "items", P{"limit": 2}, "must NOT have more than 2 items")},
		},
		{
			name:   "unevaluatedProperties",
			schema: `{"allOf":[{"properties":{"a":true}}],"unevaluatedProperties":false}`,
			input:  `{"a":1,"b":2}`,
			want:   []toolerr.Issue{iss("", "#/unevaluatedProperties", "unevaluatedProperties", P{"unevaluatedProperty": "b"}, "must NOT have unevaluated properties")},
		},
		{
			name:   "pointer escaping",
			schema: `{"properties":{"a/b~c d":{"type":"string"}}}`,
			input:  `{"a/b~c d":1}`,
			want:   []toolerr.Issue{iss("/a~1b~0c d", "#/properties/a~1b~0c%20d/type", "type", P{"type": "string"}, "must be string")},
		},
		{
			name:   "$ref reports the target's path",
			schema: `{"properties":{"n":{"$ref":"#/$defs/pos"}},"$defs":{"pos":{"type":"integer","minimum":1}}}`,
			input:  `{"n":0}`,
			want:   []toolerr.Issue{iss("/n", "#/$defs/pos/minimum", "minimum", P{"comparison": ">=", "limit": json.Number("1")}, "must be >= 1")},
		},
		{
			name:   "order: instance location, indices numerically",
			schema: `{"required":["z"],"items":{"type":"string"},"properties":{"b":{"type":"string"}}}`,
			input:  `[0,1,2,3,4,5,6,7,8,9,10,"s"]`,
			want: []toolerr.Issue{
				iss("/0", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/1", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/2", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/3", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/4", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/5", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/6", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/7", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/8", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/9", "#/items/type", "type", P{"type": "string"}, "must be string"),
				iss("/10", "#/items/type", "type", P{"type": "string"}, "must be string"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := mustLoad(t, tt.schema)
			for range 3 { // deterministic across map orders
				_, err := tool.ValidateInput([]byte(tt.input))
				te := asToolErr(t, err, toolerr.InputValidationFailed)
				assertIssues(t, te.Issues, tt.want)
				if want := "input" + tt.want[0].InstancePath + " " + tt.want[0].Message; !strings.HasPrefix(te.Message, want) {
					t.Errorf("message %q, want prefix %q", te.Message, want)
				}
			}
		})
	}
}

func TestJSNumber(t *testing.T) {
	for in, want := range map[string]string{
		"3": "3", "-7": "-7", "0.5": "0.5", "1e21": "1e+21", "1e-7": "1e-7", "0.000001": "0.000001", "1.5e-9": "1.5e-9",
		"123456789012345678901": "123456789012345680000", "0": "0", "1/3": "0.3333333333333333",
	} {
		r, _ := new(big.Rat).SetString(in)
		if got := jsNumber(r); string(got) != want {
			t.Errorf("jsNumber(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	got := classify(fragmentTokens("/properties/properties/then/items/0/$defs/a~1b/oneOf/1/enum/0"))
	want := []role{roleKeyword, roleName, roleKeyword, roleKeyword, roleIndex, roleKeyword, roleName, roleKeyword, roleIndex, roleKeyword, roleData}
	if len(got) != len(want) {
		t.Fatalf("classify = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func iss(instancePath, schemaPath, keyword string, params P, message string) toolerr.Issue {
	return toolerr.Issue{InstancePath: instancePath, SchemaPath: schemaPath, Keyword: keyword, Params: params, Message: message}
}
