package fuel

import (
	"reflect"
	"strings"
	"testing"
)

// TestStatsRoundTrip: MarshalStats/UnmarshalStats keep every field, and a
// record of another pass version or a malformed one is refused.
func TestStatsRoundTrip(t *testing.T) {
	for _, f := range []string{"testdata/wat/bulk.wasm", "testdata/wat/reset.wasm", "testdata/wat/features.wasm"} {
		_, st := mustInstrument(t, readFile(t, f))
		b, err := MarshalStats(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalStats(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Errorf("%s: %+v != %+v", f, got, st)
		}
	}
	b, _ := MarshalStats(&Stats{Resettable: true})
	other := strings.Replace(string(b), `"pass":`, `"pass":1`, 1)
	for _, bad := range []string{"", "{}", "null", other, `{"pass":5}`, `{"pass":5,"stats":{"Resettable":true,"Evil":1}}`, string(b[:len(b)-1])} {
		if _, err := UnmarshalStats([]byte(bad)); err == nil {
			t.Errorf("UnmarshalStats(%q) accepted", bad)
		}
	}
}
