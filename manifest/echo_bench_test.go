package manifest

import (
	"strings"
	"testing"
)

// BenchmarkValidateEcho1KiB is the validated echo of bench/: a 1 KiB string
// in an object, input (with defaults filling) then output.
func BenchmarkValidateEcho1KiB(b *testing.B) {
	tool := mustLoad(b, `{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`)
	in := []byte(`{"data":"` + strings.Repeat("x", 1024) + `"}`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		v, err := tool.ValidateInput(in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tool.ValidateOutput(v); err != nil {
			b.Fatal(err)
		}
	}
}
