package conformance

import "testing"

// FuzzParseCaseFile: case files come from the pack under test; any bytes
// give a CaseFile or an error, never a panic, and an accepted file
// satisfies the documented invariants.
func FuzzParseCaseFile(f *testing.F) {
	f.Add([]byte(`{"tool":"a","cases":[{"name":"x","input":{},"expect":{"output":{"a":1}}}]}`))
	f.Add([]byte(`{"tool":"a","cases":[{"name":"x","input":1,"expect":{"outputSchema":{"type":"object"}}}]}`))
	f.Add([]byte(`{"tool":"a","cases":[{"name":"x","input":null,"timeoutMs":5,"expect":{"error":{"code":"handler-error","messageContains":"m"}}}]}`))
	f.Add([]byte(`{"tool":"a","cases":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cf, err := ParseCaseFile(b)
		if err != nil {
			return
		}
		if cf.Tool == "" {
			t.Fatal("accepted a file without a tool")
		}
		names := map[string]bool{}
		for _, c := range cf.Cases {
			if c.Name == "" || names[c.Name] || len(c.Input) == 0 {
				t.Fatalf("accepted case %+v", c)
			}
			names[c.Name] = true
			n := 0
			if len(c.Expect.Output) > 0 {
				n++
			}
			if c.Expect.schema != nil {
				n++
			}
			if c.Expect.Error != nil {
				n++
			}
			if n != 1 {
				t.Fatalf("case %q has %d expectations", c.Name, n)
			}
		}
	})
}
