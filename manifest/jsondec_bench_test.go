package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// BenchmarkDecode compares sandboxd's JSON decoder (decodeJSON: duplicate
// keys detected, exact numbers, byte spans, bounded depth and number size)
// with what it replaced, encoding/json into any with UseNumber, on a 1 KiB
// tool input and on the example tool manifest. docs/RATIONALE.md quotes it.
func BenchmarkDecode(b *testing.B) {
	manifestJSON, err := os.ReadFile("../examples/echo/tool.json")
	if err != nil {
		b.Fatal(err)
	}
	docs := []struct {
		name string
		data []byte
		opts decodeOpts
	}{
		{"input1KiB", []byte(`{"data":"` + strings.Repeat("x", 1024) + `","n":12,"tags":["a","b"]}`), decodeOpts{borrow: true}},
		{"manifest", manifestJSON, decodeOpts{maxDepth: maxSchemaDepth, rejectDuplicates: true, spanDepth: 3}},
	}
	for _, d := range docs {
		b.Run(d.name+"/sandboxd", func(b *testing.B) {
			b.SetBytes(int64(len(d.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeJSON(d.data, d.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(d.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(d.data)))
			b.ReportAllocs()
			for b.Loop() {
				dec := json.NewDecoder(bytes.NewReader(d.data))
				dec.UseNumber()
				var v any
				if err := dec.Decode(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
