package manifest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeTicking decodes data with a check after every byte (tickBytes 1),
// counting the checks.
func decodeTicking(data []byte, opts decodeOpts) (*decoded, int, error) {
	old := tickBytes
	tickBytes = 1
	defer func() { tickBytes = old }()
	n := 0
	opts.check = func() error { n++; return nil }
	d, err := decodeJSON(data, opts)
	return d, n, err
}

// FuzzDecodeTicksAgree: a decoder that ticks (at every byte, the most
// interleaved it can be) decodes every document as the one that does not:
// the same tree, flags and error.
func FuzzDecodeTicksAgree(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9\ud83d\ude00",true,null]}`, `  "plain"  `, `{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`,
		`[` + strings.Repeat("1", 1200) + `]`, `1e99999`, `{"k":"v"} x`, `[[[[]]]]`, `"\u00zz"`, ``} {
		f.Add([]byte(s), false, false)
		f.Add([]byte(s), true, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, discard, borrow bool) {
		opts := decodeOpts{discard: discard, borrow: borrow, budget: 1 << 20}
		want, werr := decodeJSON(data, opts)
		got, _, gerr := decodeTicking(data, opts)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("%q: errors %v / %v", data, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%q: decoded %#v / %#v", data, want, got)
		}
	})
}

// A check's error stops the decoding of a large document within a tick:
// every shape whose reading is one long run (a string, whitespace, number
// digits, escapes, members).
func TestDecodeStopsAtCheck(t *testing.T) {
	const size = 8 << 20
	docs := map[string]string{
		"plain string":     `"` + strings.Repeat("x", size) + `"`,
		"escaped string":   `"` + strings.Repeat(`\n`, size/2) + `"`,
		"non-ASCII string": `"` + strings.Repeat("é", size/2) + `"`,
		"whitespace":       strings.Repeat(" ", size) + `1`,
		"digits":           strings.Repeat("1", size),
		"array":            `[` + strings.Repeat("1,", size/2) + `1]`,
	}
	stop := errors.New("stop")
	for name, doc := range docs {
		for _, discard := range []bool{false, true} {
			calls := 0
			_, err := decodeJSON([]byte(doc), decodeOpts{discard: discard, check: func() error {
				calls++
				if calls == 3 {
					return stop
				}
				return nil
			}})
			if err != stop || calls != 3 {
				t.Errorf("%s (discard %v): %v after %d checks, want the check's error at the third", name, discard, err, calls)
			}
		}
	}
}

// ValidateLimited's decoding is stopped by w.Check: a 64 MiB string for a
// fast-path schema and for the full path stops within a tick of the
// check's deadline and returns its error.
func TestValidateLimitedDecodingStops(t *testing.T) {
	doc := []byte(`{"data":"` + strings.Repeat("x", 64<<20) + `"}`)
	schemas := map[string]string{
		"fast path":   `{"type":"object","properties":{"data":{"type":"string"}},"required":["data"]}`,
		"full path":   `{"type":"object","properties":{"data":{"type":"string","maxLength":3}}}`,
		"accepts all": `{}`,
	}
	stop := errors.New("deadline")
	for name, src := range schemas {
		s, err := CompileSchema("#", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		start := time.Now()
		_, _, err = s.ValidateLimited(doc, false, 1<<30, Work{Check: func() error {
			calls++
			if calls >= 2 {
				return stop
			}
			return nil
		}})
		if err != stop {
			t.Errorf("%s: %v after %d checks, want the check's error", name, err, calls)
		}
		t.Logf("%s: stopped after %d checks, %v", name, calls, time.Since(start))
	}
}
