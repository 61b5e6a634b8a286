package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// g01Grace is what a stopped validation may take past its deadline: a
// check is due every fraction of a millisecond of work, so this is only
// for a loaded machine.
const g01Grace = 100 * time.Millisecond

func g01Compile(t testing.TB, schema map[string]any) *Schema {
	t.Helper()
	raw, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	s, err := CompileSchema("/input", raw)
	if err != nil {
		t.Fatalf("the schema must pass the load-time guard: %v", err)
	}
	return s
}

func g01Array(n int, item string) []byte { return []byte(sandboxtest.Array(n, item)) }

func g01Object(n int, value string) []byte {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, "%q:%s", fmt.Sprintf("k%d", i), value)
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

// g01Validate validates doc against s with deadline and an unlimited work
// budget, and returns the error and the time it took: its wall time, or
// when the machine is so loaded that the validating thread ran less than
// half of it, its CPU time (a stopped validation's work is what counts;
// the time it waited for a CPU is not its doing).
func g01Validate(s *Schema, doc []byte, fill bool, deadline time.Duration) (took time.Duration, err error) {
	took = sandboxtest.Timed(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, _, err = s.ValidateLimited(doc, fill, 0, Work{Limit: 1 << 40, Check: ctx.Err})
	})
	return took, err
}

// TestG01ValidationBoundedByDeadline: the reproducer's schema applied to
// every item of a 201-byte array took 25-32 s whatever the deadline; it
// now stops at the deadline (Work.Check), and within its work budget it is
// refused with a *WorkError before the deadline.
func TestG01ValidationBoundedByDeadline(t *testing.T) {
	schema := sandboxtest.G01Schema()
	s := g01Compile(t, schema)
	doc := g01Array(100, "0")
	const deadline = 300 * time.Millisecond
	took, err := g01Validate(s, doc, true, deadline)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline's error, got %v after %v", err, took)
	}
	if took > deadline+g01Grace {
		t.Fatalf("validation stopped %v after it began, deadline %v", took, deadline)
	}

	// Within a work budget: refused with a WorkError, whatever the clock.
	start := time.Now()
	_, _, err = s.ValidateLimited(doc, false, 0, Work{Limit: WorkLimit(100)})
	var werr *WorkError
	if !errors.As(err, &werr) || !errors.Is(err, ErrWorkBudget) || werr.Limit != WorkLimit(100) {
		t.Fatalf("want a WorkError of limit %d, got %v", WorkLimit(100), err)
	}
	t.Logf("refused over %d units after %v", werr.Limit, time.Since(start))

	// Through the Tool: input-validation-failed naming the budget.
	m := fmt.Sprintf(`{"id":"g01","version":"1.0.0","description":"d","codeArtifactRef":{"kind":"filesystem","modulePath":"x.wasm"},"input":%s,"output":%s}`, mustJSON(schema), mustJSON(schema))
	tool, err := Load([]byte(m))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tool.ValidateInputLimited(doc, 0, Work{Limit: WorkLimit(100)})
	te := toolerr.As(err)
	if te == nil || te.Code != toolerr.InputValidationFailed || te.Details["budget"] != "validationWork" || te.Details["raise"] != "limits.cpuMs" || !strings.Contains(te.Message, "budget") {
		t.Fatalf("want input-validation-failed naming the budget, got %#v", te)
	}
	_, err = tool.ValidateOutputLimited(doc, 0, Work{Limit: WorkLimit(100)})
	if te := toolerr.As(err); te == nil || te.Code != toolerr.OutputValidationFailed || te.Details["budget"] != "validationWork" {
		t.Fatalf("want output-validation-failed naming the budget, got %#v", te)
	}
	// A Check's own error comes back as it is.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = tool.ValidateInputLimited(doc, 0, Work{Check: func() error { return toolerr.As(ctx.Err()) }})
	if te := toolerr.As(err); te == nil || te.Code != toolerr.Cancelled {
		t.Fatalf("want cancelled, got %v", err)
	}
}

// TestG01ValidationShapes: other schema shapes that cost far more per
// document than per value (each would take seconds to minutes unmetered)
// stop at the deadline or are refused over the budget, never later.
func TestG01ValidationShapes(t *testing.T) {
	ints := map[string]any{"type": "integer"}
	str := map[string]any{"type": "string"}
	h1 := sandboxtest.G01Heavy(1)
	patterns := make([]any, 3000)
	formats := make([]any, 3000)
	for i := range patterns {
		patterns[i] = map[string]any{"pattern": "[xy]z"}
		formats[i] = map[string]any{"format": "uri-reference"}
	}
	keyPatterns := map[string]any{}
	for i := range 3000 {
		keyPatterns[fmt.Sprintf("[xy]z%d", i)] = true
	}
	multiples := make([]any, 100)
	uniques := make([]any, 2000)
	for i := range multiples {
		multiples[i] = map[string]any{"multipleOf": 0.7}
	}
	for i := range uniques {
		uniques[i] = map[string]any{"uniqueItems": true}
	}
	deep := "[" + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + "]" // one uniqueItems: ~3 ms
	// Strings of 32 KiB: one regular expression over one string runs to
	// its end (about 3 ms; 30 ms under -race).
	long := []byte(`"` + strings.Repeat("b", 32<<10) + `"`)
	cases := []struct {
		name   string
		schema map[string]any
		doc    []byte
		fill   bool
	}{
		{"allOf", map[string]any{"items": sandboxtest.G01Heavy(3), "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"anyOf-failing", map[string]any{"items": map[string]any{"not": map[string]any{"$ref": "#/$defs/a6"}}, "$defs": sandboxtest.G01Defs("anyOf", 10, str)}, g01Array(100, "0"), false},
		{"oneOf", map[string]any{"items": sandboxtest.G01Heavy(2), "$defs": sandboxtest.G01Defs("oneOf", 10, ints)}, g01Array(100, "0"), false},
		{"not", map[string]any{"items": map[string]any{"not": map[string]any{"not": h1}}, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"ref-recursion", map[string]any{"$ref": "#/$defs/n", "$defs": map[string]any{"n": map[string]any{
			"properties": map[string]any{"x": map[string]any{"allOf": []any{map[string]any{"$ref": "#/$defs/n"}, map[string]any{"$ref": "#/$defs/n"}}}}}}},
			[]byte(strings.Repeat(`{"x":`, 40) + "0" + strings.Repeat("}", 40)), false},
		{"prefixItems", map[string]any{"prefixItems": []any{h1, h1, h1}, "items": h1, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"additionalProperties", map[string]any{"additionalProperties": h1, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Object(100, "0"), false},
		{"patternProperties", map[string]any{"patternProperties": map[string]any{"^k": h1, "": h1}, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Object(100, "0"), false},
		{"contains", map[string]any{"contains": map[string]any{"allOf": []any{h1, str}}, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"dependentSchemas", map[string]any{"items": map[string]any{"dependentSchemas": map[string]any{"a": map[string]any{"properties": map[string]any{"a": h1}}}}, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, `{"a":0}`), false},
		{"unevaluatedProperties", map[string]any{"unevaluatedProperties": h1, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Object(100, "0"), false},
		{"unevaluatedItems", map[string]any{"prefixItems": []any{true}, "unevaluatedItems": h1, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"if-then-else", map[string]any{"items": map[string]any{"if": h1, "then": h1, "else": h1}, "$defs": sandboxtest.G01Defs("allOf", 10, ints)}, g01Array(100, "0"), false},
		{"propertyNames", map[string]any{"propertyNames": sandboxtest.G01Heavy(3), "$defs": sandboxtest.G01Defs("allOf", 10, str)}, g01Object(100, "0"), false},
		{"pattern", map[string]any{"anyOf": patterns}, long, false},
		{"pattern-not", map[string]any{"not": map[string]any{"anyOf": patterns}}, long, false},
		{"patternProperties-keys", map[string]any{"patternProperties": keyPatterns}, []byte(`{"` + strings.Repeat("b", 32<<10) + `":0}`), false},
		{"format", map[string]any{"allOf": formats}, long, false},
		{"multipleOf-big-numbers", map[string]any{"items": map[string]any{"allOf": multiples}}, g01Array(100, "1."+strings.Repeat("3", 990)+"e9999"), false},
		{"uniqueItems-deep", map[string]any{"allOf": uniques}, g01Array(10, deep), false},
		{"defaults", map[string]any{"items": map[string]any{"$ref": "#/$defs/a6"}, "$defs": sandboxtest.G01Defs("allOf", 10, map[string]any{"properties": map[string]any{"p": map[string]any{"default": 1}}})}, g01Array(100, "{}"), true},
	}
	const deadline = 200 * time.Millisecond
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := g01Compile(t, tc.schema)
			took, err := g01Validate(s, tc.doc, tc.fill, deadline)
			if took > deadline+g01Grace {
				t.Fatalf("validation took %v, deadline %v", took, deadline)
			}
			// Each shape is heavy enough to be stopped: the test fails
			// when the meter does not see its work.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want the deadline's error, got %v after %v", err, took)
			}
			_, _, err = s.ValidateLimited(tc.doc, tc.fill, 0, Work{Limit: 20000})
			if !errors.Is(err, ErrWorkBudget) {
				t.Fatalf("want ErrWorkBudget within 20000 units, got %v", err)
			}
		})
	}
}

// TestG01ValidationLeafLoop: assertions that fail before the library
// reaches the meter (here an enum of 1000 numbers, about 1.2 ms per item)
// are bounded up front: values × the heaviest assertion over the budget
// is refused before any validation work (200,000 items would take
// minutes).
func TestG01ValidationLeafLoop(t *testing.T) {
	var enum []any
	for i := 1; i <= 1000; i++ {
		enum = append(enum, i)
	}
	s := g01Compile(t, map[string]any{"items": map[string]any{"enum": enum}})
	start := time.Now()
	_, _, err := s.ValidateLimited(g01Array(200000, "0"), false, 0, Work{Limit: WorkLimit(10000)})
	if took := time.Since(start); !errors.Is(err, ErrWorkBudget) || took > time.Second {
		t.Fatalf("want ErrWorkBudget at once, got %v after %v", err, took)
	}
	// Within the budget it runs: 100 items.
	if _, issues, err := s.ValidateLimited(g01Array(100, "0"), false, 0, Work{Limit: WorkLimit(100)}); err != nil || len(issues) == 0 {
		t.Fatalf("100 items: err %v, %d issues", err, len(issues))
	}
}

// TestG01OrdinaryDocumentsPass: the budget does not refuse ordinary
// documents: a 10,000-item array of objects against an ordinary schema
// costs a small part of the smallest budget.
func TestG01OrdinaryDocumentsPass(t *testing.T) {
	s := g01Compile(t, map[string]any{"type": "array", "items": map[string]any{
		"type": "object", "required": []any{"id", "name"},
		"properties": map[string]any{
			"id": map[string]any{"type": "integer", "minimum": 0}, "name": map[string]any{"type": "string", "maxLength": 64},
			"tags": map[string]any{"type": "array", "items": map[string]any{"enum": []any{"a", "b", "c"}}},
			"kind": map[string]any{"anyOf": []any{map[string]any{"const": "x"}, map[string]any{"const": "y"}}},
		}}})
	doc := g01Array(10000, `{"id":1,"name":"n","tags":["a","b"],"kind":"y"}`)
	m := newMeter(Work{Limit: MinWorkLimit})
	d, err := decodeJSON(doc, decodeOpts{budget: DefaultValidationBudget})
	if err != nil {
		t.Fatal(err)
	}
	var issues []toolerr.Issue
	func() {
		defer recoverStop(&err)
		issues = s.validate(d.v, m)
	}()
	if err != nil || len(issues) > 0 {
		t.Fatalf("err %v, issues %v", err, issues)
	}
	t.Logf("10,000 items: %d units of %d", m.used, MinWorkLimit)
	if m.used > MinWorkLimit/2 {
		t.Fatalf("10,000 ordinary items cost %d units, over half the smallest budget (%d)", m.used, MinWorkLimit)
	}
	if _, _, err := s.ValidateLimited(doc, true, 0, Work{Limit: WorkLimit(1)}); err != nil {
		t.Fatal(err)
	}
}

// FuzzG01ValidationBounded: random schema shapes (the combinator and
// member applicator of each level, the leaf, the fan-out) × documents
// (array, object or nested): validation under a 100 ms deadline ends
// within g01Grace of it, whatever the shape.
func FuzzG01ValidationBounded(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 10, 0, 100}, {1, 1, 10, 1, 100}, {2, 2, 9, 2, 60}, {3, 3, 10, 0, 50},
		{4, 4, 8, 1, 80}, {5, 5, 10, 2, 40}, {6, 6, 7, 0, 100}, {7, 7, 10, 1, 30},
		{8, 8, 10, 0, 100}, {9, 9, 6, 2, 90}, {10, 10, 10, 1, 100}, {11, 11, 5, 0, 70},
		{15, 0, 10, 2, 200}, {18, 3, 10, 2, 200}, {16, 10, 10, 2, 100}, {19, 4, 8, 3, 40},
	} {
		f.Add(seed)
	}
	combs := []string{"allOf", "anyOf", "oneOf"}
	leaves := []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}, map[string]any{}, map[string]any{"minimum": 0}, map[string]any{"enum": []any{0, 1, 2}}, map[string]any{"pattern": "[xy]z"}, map[string]any{"format": "uri-reference"}}
	wrap := []func(h map[string]any) map[string]any{
		func(h map[string]any) map[string]any { return map[string]any{"items": h} },
		func(h map[string]any) map[string]any { return map[string]any{"not": map[string]any{"not": h}} },
		func(h map[string]any) map[string]any { return map[string]any{"prefixItems": []any{h}, "items": h} },
		func(h map[string]any) map[string]any { return map[string]any{"additionalProperties": h} },
		func(h map[string]any) map[string]any {
			return map[string]any{"patternProperties": map[string]any{"": h}}
		},
		func(h map[string]any) map[string]any { return map[string]any{"contains": h} },
		func(h map[string]any) map[string]any {
			return map[string]any{"items": map[string]any{"dependentSchemas": map[string]any{"a": map[string]any{"properties": map[string]any{"a": h}}}}}
		},
		func(h map[string]any) map[string]any { return map[string]any{"unevaluatedProperties": h} },
		func(h map[string]any) map[string]any { return map[string]any{"unevaluatedItems": h} },
		func(h map[string]any) map[string]any {
			return map[string]any{"items": map[string]any{"if": h, "then": h}}
		},
		func(h map[string]any) map[string]any { return map[string]any{"propertyNames": h} },
		func(h map[string]any) map[string]any {
			return map[string]any{"$ref": "#/$defs/n", "$defs": map[string]any{"n": map[string]any{"properties": map[string]any{"x": map[string]any{"allOf": []any{map[string]any{"$ref": "#/$defs/n"}, map[string]any{"$ref": "#/$defs/n"}, h}}}}}}
		},
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 5 {
			return
		}
		comb, shape, fan, docKind, n := combs[int(b[0])%len(combs)], wrap[int(b[1])%len(wrap)], 2+int(b[2])%9, int(b[3])%4, 1+int(b[4])
		leaf := leaves[int(b[0]/3)%len(leaves)]
		schema := shape(map[string]any{"$ref": "#/$defs/a6"})
		defs, _ := schema["$defs"].(map[string]any)
		if defs == nil {
			defs = map[string]any{}
			schema["$defs"] = defs
		}
		for k, v := range sandboxtest.G01Defs(comb, fan, leaf) {
			defs[k] = v
		}
		raw, _ := json.Marshal(schema)
		s, err := CompileSchema("/input", raw)
		if err != nil {
			t.Logf("refused at load: %v", err)
			return // refused at load: nothing runs
		}
		var doc []byte
		switch docKind {
		case 0:
			doc = g01Array(n, "0")
		case 1:
			doc = g01Object(n, `"s"`)
		case 2:
			doc = g01Array(n, `"`+strings.Repeat("b", 4096)+`"`)
		default:
			doc = []byte(strings.Repeat(`{"x":[`, n%48) + `{"a":0}` + strings.Repeat("]}", n%48))
		}
		const deadline = 100 * time.Millisecond
		if took, _ := g01Validate(s, doc, true, deadline); took > deadline+g01Grace {
			t.Fatalf("%s: validation took %v, deadline %v", raw, took, deadline)
		}
	})
}
