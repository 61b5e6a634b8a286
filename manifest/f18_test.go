package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// peakHeap runs f and returns the peak growth of the Go heap's live
// objects while it ran (sampled every millisecond).
func peakHeap(f func()) int64 {
	read := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var p uint64
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			p = max(p, read())
			select {
			case <-stop:
				done <- p
				return
			case <-tk.C:
			}
		}
	}()
	f()
	close(stop)
	return int64(<-done) - int64(base)
}

// zeros is {"a":[0,0,…]} with n elements (2n bytes).
func zeros(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"a":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('0')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

const itemsString = `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`

// F18 finding shape: a 2 MB input {"a":[0,…]} (1M items) against items
// string. Within a 16 MiB budget it is refused before the validator runs:
// one issue, in milliseconds, with memory bounded by the budget.
func TestF18InputItemsStringRefusedWithinBudget(t *testing.T) {
	tool := mustTool(t, itemsString, `{}`)
	doc := zeros(1_000_000)
	const budget = 16 << 20
	var err error
	t0 := time.Now()
	growth := peakHeap(func() { _, err = tool.ValidateInputWithin(doc, budget) })
	took := time.Since(t0)
	te := toolerr.As(err)
	answer, _ := json.Marshal(te)
	t.Logf("%d-byte input, budget %d MiB: %v, %d issue(s), answer %d bytes, %v, heap peak growth %.1f MiB",
		len(doc), budget>>20, te.Code, len(te.Issues), len(answer), took, float64(growth)/(1<<20))
	if err == nil || te.Code != toolerr.InputValidationFailed || !errors.Is(err, ErrValidationBudget) {
		t.Fatalf("err %v, want input-validation-failed matching ErrValidationBudget", err)
	}
	if len(te.Issues) != 1 || len(answer) > 4096 {
		t.Errorf("%d issues, %d-byte answer", len(te.Issues), len(answer))
	}
	if lim := int64(budget)*5/4 + 32<<20; growth > lim {
		t.Errorf("heap grew %d > %d", growth, lim)
	}
	if took > 2*time.Second {
		t.Errorf("took %v", took)
	}
	// The default budget refuses it too (1M values × ValueCost > 256 MiB).
	if _, err := tool.ValidateInput(doc); !errors.Is(err, ErrValidationBudget) {
		t.Errorf("default budget: %v", err)
	}
}

// F18: when the document fits the budget, the issues are capped (Ajv's
// allErrors with a ceiling): MaxIssues plus one saying how many more.
func TestF18IssuesCapped(t *testing.T) {
	tool := mustTool(t, itemsString, `{}`)
	const n = 100_000
	doc := zeros(n)
	var err error
	t0 := time.Now()
	growth := peakHeap(func() { _, err = tool.ValidateInputWithin(doc, 64<<20) })
	took := time.Since(t0)
	te := toolerr.As(err)
	answer, _ := json.Marshal(te)
	t.Logf("%d failing items: %d issues, answer %d bytes, %v, heap peak growth %.1f MiB", n, len(te.Issues), len(answer), took, float64(growth)/(1<<20))
	if te.Code != toolerr.InputValidationFailed || len(te.Issues) != MaxIssues+1 {
		t.Fatalf("%v with %d issues", err, len(te.Issues))
	}
	if first := te.Issues[0]; first.InstancePath != "/a/0" || first.Keyword != "type" {
		t.Errorf("first issue %+v", first)
	}
	last := te.Issues[MaxIssues]
	if last.Keyword != "" || last.Params["omitted"] != n-MaxIssues || last.Message != fmt.Sprintf("… and %d more issues", n-MaxIssues) {
		t.Errorf("last issue %+v", last)
	}
	if len(answer) > 1<<20 {
		t.Errorf("answer %d bytes", len(answer))
	}
	if lim := int64(64<<20)*5/4 + 32<<20; growth > lim {
		t.Errorf("heap grew %d > %d", growth, lim)
	}
}

// F18 variant: issues carrying huge caller strings (a 1 MB property name)
// stay small: every string is cut, and the issues' total size is capped.
func TestF18IssueStringsCut(t *testing.T) {
	tool := mustTool(t, `{"type":"object","additionalProperties":false,"propertyNames":{"maxLength":3}}`, `{}`)
	var b strings.Builder
	b.WriteString("{")
	for i := range 50 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:{}", fmt.Sprintf("%02d", i)+strings.Repeat("k", 100_000))
	}
	b.WriteString("}")
	_, err := tool.ValidateInput([]byte(b.String()))
	te := toolerr.As(err)
	answer, _ := json.Marshal(te)
	t.Logf("50 keys of 100 KB: %d issues, answer %d bytes", len(te.Issues), len(answer))
	if te.Code != toolerr.InputValidationFailed || len(answer) > 1<<20 {
		t.Fatalf("%v, answer %d bytes", te.Code, len(answer))
	}
	for _, is := range te.Issues {
		if p, _ := is.Params["additionalProperty"].(string); len(p) > maxIssueString+32 {
			t.Fatalf("param of %d bytes", len(p))
		}
	}
}

// The estimate charged against the budget covers what validation really
// holds, for the shapes that cost the most per byte.
func TestF18BudgetEstimateCoversMeasured(t *testing.T) {
	k := 1 // the documents' sizes are divided by k
	if testing.Short() {
		k = 4 // tens of MiB of trees instead of ~90 MiB each; the 4 MiB slack weighs more
	}
	cases := []struct{ name, schema, doc string }{
		{"failing numbers", itemsString, string(zeros(200_000 / k))},
		{"valid numbers", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}}`, string(zeros(200_000 / k))},
		{"failing small objects", `{"type":"array","items":{"type":"object","required":["x"]}}`, "[" + strings.Repeat(`{"y":1},`, 50_000/k) + `{"y":1}]`},
		{"many keys", `{"type":"object","additionalProperties":{"type":"string"}}`, keysDoc(100_000 / k)},
		{"escaped strings", `{"type":"array","items":{"type":"integer"}}`, "[" + strings.Repeat(`"a\n",`, 100_000/k) + `"a"]`},
		{"nested arrays", `{"type":"array","items":{"type":"array","items":{"type":"string"}}}`, "[" + strings.Repeat(`[0,0],`, 60_000/k) + `[0]]`},
	}
	for _, tc := range cases {
		s, err := CompileSchema("/input", json.RawMessage(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodeJSON([]byte(tc.doc), decodeOpts{borrow: true, budget: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		est := d.cost
		d = nil
		doc := []byte(tc.doc)
		var nIssues int
		growth := peakHeap(func() {
			_, iss, err := s.ValidateWithin(doc, true, est+1)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			nIssues = len(iss)
		})
		t.Logf("%-22s %8d bytes: estimate %6.1f MiB, measured heap peak %6.1f MiB, %d issues", tc.name, len(doc), float64(est)/(1<<20), float64(growth)/(1<<20), nIssues)
		if growth > est*5/4+4<<20 {
			t.Errorf("%s: measured %d > estimate %d ×1.25 + 4 MiB", tc.name, growth, est)
		}
	}
}

func keysDoc(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	b.WriteString("}")
	return b.String()
}

// A schema that accepts everything checks a huge output without a tree.
func TestF18AcceptAllSchemaNeedsNoTree(t *testing.T) {
	tool := mustTool(t, `{}`, `{"description":"anything"}`)
	doc := zeros(5_000_000) // 10 MB, 5M values: 1.5 GB as a tree
	var err error
	growth := peakHeap(func() { _, err = tool.ValidateOutputWithin(doc, 1<<20) })
	t.Logf("10 MB output, schema {}: heap peak growth %.1f MiB", float64(growth)/(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if growth > 8<<20 {
		t.Errorf("heap grew %d", growth)
	}
	if _, err := tool.ValidateOutput([]byte(`[1,`)); err == nil {
		t.Error("invalid JSON accepted under schema {}")
	}
	if _, err := tool.ValidateOutput([]byte(`1e99999`)); err == nil {
		t.Error("the number limits no longer apply under schema {}")
	}
}

func mustTool(t *testing.T, input, output string) *Tool {
	t.Helper()
	m := fmt.Sprintf(`{"id":"t.f18","version":"1.0.0","description":"x","input":%s,"output":%s,"codeArtifactRef":{"kind":"filesystem","modulePath":"x.wasm"}}`, input, output)
	tool, err := Load([]byte(m))
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// FuzzValidateWithinBudget: the budget only ever refuses (never changes a
// verdict or the issues of a document it lets through), the tree-less
// check of an accept-all schema agrees with a full decode, and issues stay
// within their bounds.
func FuzzValidateWithinBudget(f *testing.F) {
	for _, s := range []string{`{}`, `[0,0,0]`, `{"a":[0,"x",{"b":[]}]}`, `"\u00e9\n"`, `{"a":1,"a":2}`, `1e99999`, `[`, `[1,]`} {
		f.Add([]byte(s), uint16(1000))
	}
	all := mustSchema(f, `{"description":"anything"}`)
	strict := mustSchema(f, `{"type":"object","additionalProperties":{"type":"array","items":{"type":"string"}},"propertyNames":{"maxLength":2}}`)
	f.Fuzz(func(t *testing.T, doc []byte, budget uint16) {
		_, _, fullErr := all.ValidateWithin(doc, true, 1<<40) // with defaults: a full decode
		_, _, fastErr := all.ValidateWithin(doc, false, 1)    // tree-less
		if (fullErr == nil) != (fastErr == nil) {
			t.Fatalf("accept-all: full decode %v, tree-less %v", fullErr, fastErr)
		}
		out1, iss1, err1 := strict.ValidateWithin(doc, true, 1<<40)
		out2, iss2, err2 := strict.ValidateWithin(doc, true, int64(budget)+1)
		if err2 != nil && errors.Is(err2, ErrValidationBudget) {
			return
		}
		if (err1 == nil) != (err2 == nil) || string(out1) != string(out2) || len(iss1) != len(iss2) {
			t.Fatalf("budget changed the verdict: %v/%v, %d/%d issues", err1, err2, len(iss1), len(iss2))
		}
		if len(iss1) > MaxIssues+1 {
			t.Fatalf("%d issues", len(iss1))
		}
	})
}

func mustSchema(f *testing.F, s string) *Schema {
	sch, err := CompileSchema("/input", json.RawMessage(s))
	if err != nil {
		f.Fatal(err)
	}
	return sch
}
