package manifest

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// stdDecode is the reference: encoding/json with UseNumber, one value only.
func stdDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errTrailing
	}
	if dec.InputOffset() != int64(len(bytes.TrimRight(data, " \t\r\n"))) {
		return nil, errTrailing
	}
	return v, nil
}

var errTrailing = &syntaxError{msg: "trailing data"}

func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`null`, `true`, `false`, `0`, `-0`, `1.5e3`, `-12.25E-2`, `"a"`, `""`, `[]`, `{}`,
		` {"a":[1,2,{"b":null}],"c":"\u00e9\n\t\"\\\/"} `,
		`"\ud83d\ude00"`, `"héllo wörld"`, `"\u0000"`, `[[[[]]]]`,
		`{"a":1,"a":2}`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, "\"\xff\"", "\"a\xc3\"",
		// invalid
		``, ` `, `nul`, `tru`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`,
		`"abc`, "\"a\nb\"", `"\x"`, `"\u12"`, `[1 2]`, `{"a":1}{}`, `1 2`, `[`, `{"a":`, `+1`, `NaN`,
	}
	for _, doc := range docs {
		want, wantErr := stdDecode([]byte(doc))
		got, gotErr := decodeJSON([]byte(doc), decodeOpts{})
		if (wantErr != nil) != (gotErr != nil) {
			t.Errorf("%q: encoding/json err=%v, decodeJSON err=%v", doc, wantErr, gotErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(want, got.v) {
			t.Errorf("%q: encoding/json %#v, decodeJSON %#v", doc, want, got.v)
		}
	}
}

func TestDecodeJSONFlags(t *testing.T) {
	tests := []struct {
		doc        string
		dup, lossy bool
	}{
		{`{"a":1,"b":2}`, false, false},
		{`{"a":1,"a":2}`, true, false},
		{`[{"x":{"y":1,"y":1}}]`, true, false},
		{`"\ud800"`, false, true},
		{"\"\xff\"", false, true},
		{`"\ud83d\ude00"`, false, false},
	}
	for _, tt := range tests {
		d, err := decodeJSON([]byte(tt.doc), decodeOpts{})
		if err != nil {
			t.Fatalf("%q: %v", tt.doc, err)
		}
		if d.dup != tt.dup || d.lossy != tt.lossy {
			t.Errorf("%q: dup=%v lossy=%v, want %v %v", tt.doc, d.dup, d.lossy, tt.dup, tt.lossy)
		}
	}
}

func TestDecodeJSONLimits(t *testing.T) {
	tests := []struct {
		name, doc string
		opts      decodeOpts
		want      string
	}{
		{"duplicate key refused", `{"a":{"b":1,"b":2}}`, decodeOpts{rejectDuplicates: true}, `duplicate key "b" at /a/b`},
		{"depth", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), decodeOpts{}, "exceeded max nesting depth of 10000"},
		{"schema depth", strings.Repeat(`{"a":`, maxSchemaDepth+1) + "1" + strings.Repeat("}", maxSchemaDepth+1), decodeOpts{maxDepth: maxSchemaDepth}, "exceeded max nesting depth of 256"},
		{"huge exponent", `[1e999999999]`, decodeOpts{}, "number exponent out of supported range"},
		{"huge negative exponent", `{"x":-1E-10001}`, decodeOpts{}, "number exponent out of supported range"},
		{"long number", "1" + strings.Repeat("0", maxNumberLen), decodeOpts{}, "number literal longer than 1000 characters"},
		{"trailing garbage", `{} x`, decodeOpts{}, "invalid character 'x' after top-level value at offset 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeJSON([]byte(tt.doc), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// At the limits, fine.
	for _, doc := range []string{"1e10000", "-1e-10000", "1" + strings.Repeat("0", maxNumberLen-1), strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)} {
		if _, err := decodeJSON([]byte(doc), decodeOpts{}); err != nil {
			t.Errorf("%.20q...: %v", doc, err)
		}
	}
}

func TestDecodeJSONSpans(t *testing.T) {
	doc := `{ "input" : {"type": "object"} , "needsSpec":{"env":{"A/B":{ "type":"string" }}}, "n": 1 }`
	d, err := decodeJSON([]byte(doc), decodeOpts{spanDepth: 3})
	if err != nil {
		t.Fatal(err)
	}
	for ptr, want := range map[string]string{
		"/input":              `{"type": "object"}`,
		"/n":                  `1`,
		"/needsSpec/env/A~1B": `{ "type":"string" }`,
	} {
		sp, ok := d.spans[ptr]
		if !ok || doc[sp.start:sp.end] != want {
			t.Errorf("span %s = %v %q, want %q", ptr, ok, doc[sp.start:sp.end], want)
		}
	}
	if _, ok := d.spans["/needsSpec/env/A~1B/type"]; ok {
		t.Error("span recorded deeper than spanDepth")
	}
}

func TestEncodeJSON(t *testing.T) {
	d, err := decodeJSON([]byte(`{"b":[1.50,2e3,-0],"a":"<&>\u2028\u0001\"\\é","c":{"z":null,"y":true}}`), decodeOpts{})
	if err != nil {
		t.Fatal(err)
	}
	got := string(encodeJSON(d.v))
	want := `{"a":"<&>` + "\u2028" + `\u0001\"\\é","b":[1.50,2e3,-0],"c":{"y":true,"z":null}}`
	if got != want {
		t.Errorf("encodeJSON = %s\nwant          %s", got, want)
	}
	var back any
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Errorf("encodeJSON output is not JSON: %v", err)
	}
}

// FuzzDecodeJSON checks the decoder against encoding/json: same verdict,
// same value, and the encoder round-trips.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null,true]}`, `"\ud83d\ude00"`, `1e5`, `[{}]`, `{"a":1,"a":2}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := decodeJSON(data, decodeOpts{})
		want, wantErr := stdDecode(data)
		if gotErr != nil {
			var se *syntaxError
			if asSyntax(gotErr, &se) && se.limit {
				return // beyond our limits; encoding/json may accept it
			}
			if wantErr == nil {
				t.Fatalf("decodeJSON refused %q (%v), encoding/json accepted it", data, gotErr)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("decodeJSON accepted %q, encoding/json said %v", data, wantErr)
		}
		if !reflect.DeepEqual(got.v, want) {
			t.Fatalf("%q: decodeJSON %#v, encoding/json %#v", data, got.v, want)
		}
		again, err := decodeJSON(encodeJSON(got.v), decodeOpts{})
		if err != nil || !reflect.DeepEqual(again.v, got.v) {
			t.Fatalf("%q: encode/decode round trip: %v", data, err)
		}
	})
}

func asSyntax(err error, se **syntaxError) bool {
	s, ok := err.(*syntaxError)
	*se = s
	return ok
}
