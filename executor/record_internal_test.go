package executor

import (
	"bytes"
	"encoding/json"
	"testing"
)

// compactRef is what compactJSON said before its one-pass scan: b when
// json.Compact writes it back unchanged.
func compactRef(b []byte) bool {
	var buf bytes.Buffer
	return json.Compact(&buf, b) == nil && bytes.Equal(buf.Bytes(), b)
}

var compactCases = []string{
	`{"a":1}`, `{"a": 1}`, `{"a":"x y"}`, `{"a":"\"}"}`, `{"a":"\\"}`, `{"a":"\\\" "}`, `{"a":"\\\\"} `,
	` {}`, "{}\n", `[1,2,"\t"]`, "[1,\"\t\"]", `"\u0020"`, `"a\\"`, `"a\\\"b"`, `"\\\\\\"`, `""`, `[]`,
	`{"a":{"b":[true,false,null,1.5e3,"ü"]}}`, "\"\xff\"", `{"a":"b\"c d"}`, `{"a":"b\\" ,"c":1}`,
	`{"a":1`, `"abc`, `{"a":"\`, `nul`,
}

// FuzzCompactJSON checks compactJSONKnown against json.Compact: the same
// verdict for any bytes, and, given a validated (JSON) value, without
// checking it again.
func FuzzCompactJSON(f *testing.F) {
	for _, c := range compactCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := compactRef(b)
		if got := compactJSON(b) != nil; got != want {
			t.Fatalf("compactJSON(%q) = %v, json.Compact says %v", b, got, want)
		}
		if json.Valid(b) {
			if got := compactJSONKnown(b, true) != nil; got != want {
				t.Fatalf("compactJSONKnown(%q, valid) = %v, json.Compact says %v", b, got, want)
			}
		}
	})
}
