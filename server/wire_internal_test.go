package server

import (
	"encoding/json"
	"testing"
)

// TestResultPartsAreJSONMarshal: the three parts a result is written in
// join to json.Marshal's encoding of the frame and a newline (the
// output's bytes as they are, an empty output as null), the head shared
// only by protocol version 2.
func TestResultPartsAreJSONMarshal(t *testing.T) {
	for _, tc := range []struct {
		v   int
		out string
	}{{2, `{"data":"x"}`}, {2, `[1,2,3]`}, {2, `"s"`}, {2, ``}, {3, `{"a":1}`}, {10, `null`}} {
		r := wireResult{V: tc.v, Kind: "result", Output: json.RawMessage(tc.out)}
		head, out, tail := r.jsonParts()
		got := string(head) + string(out) + string(tail)
		m := r
		if len(m.Output) == 0 {
			m.Output = json.RawMessage("null")
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want)+"\n" {
			t.Errorf("v %d output %q: parts %q, json.Marshal %q", tc.v, tc.out, got, want)
		}
	}
}
