package manifest

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// fastSchemas are schemas of the fast path's shape (and some just outside
// it, which must get no fast path).
var fastSchemas = []struct {
	doc      string
	eligible bool
}{
	{`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`, true},
	{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","title":"t","properties":{"s":{"type":"string","description":"d"},"i":{"type":"integer"},"n":{"type":"number"},"b":{"type":"boolean"},"z":{"type":"null"}},"required":["s","i"]}`, true},
	{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"additionalProperties":true}`, true},
	{`{"type":"object"}`, true},
	{`{"type":"object","properties":{"a":{"type":"string","default":"x"}}}`, false},
	{`{"type":"object","properties":{"a":{"type":"string","maxLength":3}}}`, false},
	{`{"type":"object","properties":{"a":{"type":["string","null"]}}}`, false},
	{`{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`, false},
	{`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`, false},
	{`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`, false},
	{`{"type":"object","properties":{"a":true}}`, false},
	{`{"type":"array"}`, false},
}

// fastDocs are documents around the fast path's edges.
var fastDocs = []string{
	`{"data":"x"}`, `{"data":""}`, ` { "data" : "x" } `, "{\n\t\"data\":\"x\"\r\n}", `{}`, `{"data":1}`, `{"data":null}`,
	`{"data":"x","data":"y"}`, `{"data":"x","other":1}`, `{"other":1}`, `{"data":"x"} x`, `{"data":"x"`, `{"data" "x"}`,
	`{"data":"a\"b\\c\/d\b\f\n\r\t"}`, `{"data":"\u00e9\u4e2d"}`, `{"data":"\ud83d\ude00"}`, `{"data":"\ud800"}`, `{"data":"\udc00x"}`,
	`{"data":"\u12"}`, `{"data":"\x"}`, "{\"data\":\"a\x01b\"}", "{\"data\":\"\xff\"}", "{\"data\":\"\xed\xa0\x80\"}", `{"data":"é中😀"}`,
	"{\"d\\u0061ta\":\"x\"}", `{"dätä":"x"}`, `[]`, `"x"`, `null`, ``, ` `, `{"data":"x",}`, `{,}`,
	`{"s":"a","i":1}`, `{"s":"a","i":-0}`, `{"s":"a","i":1.0}`, `{"s":"a","i":1e2}`, `{"s":"a","i":01}`, `{"s":"a","i":-}`, `{"s":"a","i":12345678901234567890123}`,
	`{"s":"a","i":1,"n":1.5}`, `{"s":"a","i":1,"n":-0.25}`, `{"s":"a","i":1,"n":1.}`, `{"s":"a","i":1,"n":.5}`, `{"s":"a","i":1,"n":1E400}`,
	`{"s":"a","i":1,"b":true}`, `{"s":"a","i":1,"b":false}`, `{"s":"a","i":1,"b":tru}`, `{"s":"a","i":1,"b":"true"}`, `{"s":"a","i":1,"z":null}`, `{"s":"a","i":1,"z":nul}`,
	`{"s":"a"}`, `{"i":1}`, `{"a":1,"b":"x"}`, `{"a":"1"}`, `{"a":1,"c":{"x":[1,2,{"y":null}]}}`, `{"a":1,"c":{"x":1,"x":2}}`,
	`{"s":"` + strings.Repeat("x", 5000) + `","i":` + strings.Repeat("9", 70) + `}`,
	`{"data":"` + strings.Repeat("é", 3000) + `"}`,
}

// outcome is everything ValidateWithin returns, for comparison.
type outcome struct {
	out    string
	same   bool // out is doc's own slice
	issues string
	err    string
}

func runValidate(s *Schema, doc []byte, fill bool, budget int64) outcome {
	out, issues, err := s.ValidateWithin(doc, fill, budget)
	o := outcome{out: string(out), same: len(out) > 0 && len(doc) > 0 && &out[0] == &doc[0]}
	if issues != nil {
		b, _ := json.Marshal(issues)
		o.issues = string(b)
	}
	if err != nil {
		o.err = err.Error()
	}
	return o
}

// agree checks that ValidateWithin answers doc alike with and without the
// fast path, and reports whether the fast path accepted it.
func agree(t testing.TB, s *Schema, doc []byte, budget int64) bool {
	t.Helper()
	slow := *s
	slow.fast = nil
	eff := budget
	if eff <= 0 {
		eff = DefaultValidationBudget
	}
	took := s.fast != nil && s.reach == nil && s.fast.valid(doc, eff)
	for _, fill := range []bool{true, false} {
		got, want := runValidate(s, doc, fill, budget), runValidate(&slow, doc, fill, budget)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("schema %s, doc %q (fill %v, budget %d):\nfast path %+v\nfull path %+v", mustJSON(s.doc), doc, fill, budget, got, want)
		}
	}
	return took
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestFastPathAgrees(t *testing.T) {
	for _, sc := range fastSchemas {
		s, err := CompileSchema("/input", json.RawMessage(sc.doc))
		if err != nil {
			t.Fatal(err)
		}
		if (s.fast != nil) != sc.eligible {
			t.Fatalf("%s: fast path %v, want %v", sc.doc, s.fast != nil, sc.eligible)
		}
		took := 0
		for _, d := range fastDocs {
			for _, budget := range []int64{0, 1 << 20, 2000, 1500, 100} {
				if agree(t, s, []byte(d), budget) {
					took++
				}
			}
		}
		t.Logf("%s: fast path took %d of %d", sc.doc, took, len(fastDocs)*5)
	}
	// The common case really takes it (no decoded tree, no validator).
	s, _ := CompileSchema("/input", json.RawMessage(fastSchemas[0].doc))
	if !s.fast.valid([]byte(`{"data":"x"}`), DefaultValidationBudget) {
		t.Fatal("the echo shape does not take the fast path")
	}
}

// Random documents built from the schemas' own property names and values
// around the edges agree too.
func TestFastPathAgreesRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	vals := []string{`"x"`, `""`, `"\n"`, `"\u0041"`, `"\ud800"`, `"é"`, "\"\xff\"", `1`, `-1`, `0`, `1.5`, `1.0`, `1e3`, `true`, `false`, `null`, `[]`, `{}`, `{"k":1}`}
	names := []string{"data", "s", "i", "n", "b", "z", "a", "other"}
	ws := []string{"", " ", "\n"}
	for _, sc := range fastSchemas {
		s, err := CompileSchema("/input", json.RawMessage(sc.doc))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 3000; n++ {
			var b strings.Builder
			b.WriteString(ws[rng.Intn(3)] + "{")
			k := rng.Intn(5)
			for j := 0; j < k; j++ {
				if j > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "%s%q%s:%s%s", ws[rng.Intn(3)], names[rng.Intn(len(names))], ws[rng.Intn(3)], ws[rng.Intn(3)], vals[rng.Intn(len(vals))])
			}
			b.WriteString("}" + ws[rng.Intn(3)])
			agree(t, s, []byte(b.String()), []int64{0, 3000}[rng.Intn(2)])
		}
	}
}

func FuzzFastPathAgrees(f *testing.F) {
	for _, d := range fastDocs {
		f.Add([]byte(d), uint8(0))
	}
	var schemas []*Schema
	for _, sc := range fastSchemas {
		s, err := CompileSchema("/input", json.RawMessage(sc.doc))
		if err != nil {
			f.Fatal(err)
		}
		schemas = append(schemas, s)
	}
	f.Fuzz(func(t *testing.T, doc []byte, which uint8) {
		agree(t, schemas[int(which)%len(schemas)], doc, 0)
	})
}
