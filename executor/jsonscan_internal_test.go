package executor

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/rawbuf"
)

// validJSON answers as json.Valid does: hand-picked edge cases, nesting at
// encoding/json's depth limit, and random documents (token soup and
// mutated valid JSON) compared one by one.
func TestValidJSONIsJSONValid(t *testing.T) {
	cases := []string{
		``, ` `, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1e+5`, `1E-05`, `-1.5e3`, `1x`,
		`true`, `tru`, `truex`, `false`, `null`, `nul`, `nulll`, ` null `, "\tnull\r\n", `null null`,
		`""`, `"`, `"a`, `"\"`, `"\\"`, `"\/"`, `"\x"`, `"\u00e9"`, `"\u00G9"`, `"\u12"`, "\"\x1f\"", "\"\x7f\"",
		"\"\xff\xfe\"", "\"\xe2\x80\xa8\"", `[]`, `[ ]`, `[,]`, `[1,]`, `[1 2]`, `[1,2]`, `[[[]]]`, `[[]`, `]`,
		`{}`, `{ }`, `{"a"}`, `{"a":}`, `{"a":1}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a":1,"b":[{}]}`, `{1:2}`,
		`{"a":1}}`, `{"a" : 1 , "b" : 2}`, `[{"a":[{"b":{}}]}]`, `[1]x`, "[\x00]", `"a"` + "\x00",
	}
	for _, c := range cases {
		if got, want := validJSON([]byte(c), nil), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid %v", c, got, want)
		}
	}
	for _, open := range []string{"[", `{"k":`} {
		for _, depth := range []int{9999, 10000, 10001} {
			closeTok := "]"
			if open != "[" {
				closeTok = "}"
			}
			for _, inner := range []string{"1", "[]", "{}"} {
				doc := []byte(strings.Repeat(open, depth) + inner + strings.Repeat(closeTok, depth))
				if got, want := validJSON(doc, nil), json.Valid(doc); got != want {
					t.Errorf("%q x %d around %s: validJSON %v, json.Valid %v", open, depth, inner, got, want)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 24))
	tokens := []string{"{", "}", "[", "]", ",", ":", `"`, `\`, "u", "0", "1", "9", "a", "e", "E", "+", "-", ".",
		"true", "false", "null", "t", "n", " ", "\n", "\x00", "\x1f", "\x80", "\xff", `"k"`, `"\u00ff"`, `\"`}
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	for i := range n {
		var doc []byte
		if i%2 == 0 {
			for range r.IntN(12) {
				doc = append(doc, tokens[r.IntN(len(tokens))]...)
			}
		} else {
			doc, _ = json.Marshal(randomValue(r, 4))
			for range r.IntN(3) {
				if len(doc) == 0 {
					break
				}
				p := r.IntN(len(doc))
				switch r.IntN(3) {
				case 0:
					doc = append(doc[:p:p], doc[p+1:]...)
				case 1:
					doc[p] = tokens[r.IntN(len(tokens))][0]
				default:
					doc = append(doc[:p:p], append([]byte(tokens[r.IntN(len(tokens))]), doc[p:]...)...)
				}
			}
		}
		if got, want := validJSON(doc, nil), json.Valid(doc); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", doc, got, want)
		}
	}
}

func randomValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(7); {
	case depth == 0 || k == 0:
		return []any{nil, true, false, 0, -1.5e-7, 12345678901234567890.0}[r.IntN(6)]
	case k == 1:
		return string([]byte{byte(r.IntN(256)), '"', '\\', byte(r.IntN(32)), 'x'}[:1+r.IntN(5)])
	case k <= 3:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randomValue(r, depth-1)
		}
		return a
	default:
		m := map[string]any{}
		for range r.IntN(4) {
			m[string(rune('a'+r.IntN(26)))] = randomValue(r, depth-1)
		}
		return m
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\u00e9\n"`, `-0.5e+3`, `[`, "\"\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b, nil), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

// The chunked passes tick after every hostChunk bytes, whatever the
// document's shape (a long string, whitespace, digits), and a tick that
// panics stops them; the quoting writes into uncleared memory exactly what
// it wrote before.
func TestJSONPassesTick(t *testing.T) {
	const size = 4 << 20
	shapes := map[string][]byte{
		"string": []byte(`"` + strings.Repeat("a", size) + `"`),
		"space":  []byte(strings.Repeat(" ", size) + "1"),
		"digits": []byte("1" + strings.Repeat("0", size)),
		"array":  []byte("[" + strings.Repeat("0,", size/2) + "0]"),
	}
	for name, doc := range shapes {
		ticks := 0
		if !validJSON(doc, func() { ticks++ }) {
			t.Fatalf("%s: not valid", name)
		}
		if want := len(doc) / hostChunk; ticks < want-1 || ticks > want+1 {
			t.Errorf("%s: %d ticks for %d bytes, want about %d", name, ticks, len(doc), want)
		}
		func() {
			defer func() {
				if recover() != "stop" {
					t.Errorf("%s: a panicking tick did not stop validJSON", name)
				}
			}()
			validJSON(doc, func() { panic("stop") })
		}()
	}
	r := rand.New(rand.NewPCG(2, 24))
	text := make([]byte, 3<<20)
	for i := range text {
		text[i] = byte(r.IntN(256)) // invalid UTF-8, controls, quotes, U+2028's bytes
	}
	copy(text[1000:], "\u2028\u2029<>&\"\\\n\t")
	want := appendJSONString(nil, text, nil)
	ticks := 0
	n := jsonStringLen(text, func() { ticks++ })
	got := appendJSONString(rawbuf.Uncleared(n), text, func() { ticks++ })
	if !bytes.Equal(got, want) || len(got) != n {
		t.Fatalf("quoting into uncleared memory differs (%d bytes, want %d, length %d)", len(got), len(want), n)
	}
	if ticks < 2*(len(text)/hostChunk)-2 {
		t.Errorf("%d ticks quoting %d bytes", ticks, len(text))
	}
	var v string
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("the quoted text is not a JSON string: %v", err)
	}
}
