package httpspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/manifest"
)

// The implementations Body had before it was metered (issue 24), kept as
// the oracles of the metered ones.

// oldFillText fills a text body template (no encoding).
func oldFillText(tmpl string, input map[string]any) string {
	return placeholderRe.ReplaceAllStringFunc(tmpl, func(m string) string {
		v, ok := input[m[1:len(m)-1]]
		if !ok {
			return m // Kindgi: a missing key stays as the literal {key}
		}
		if v == nil {
			return "" // and null becomes ''
		}
		if s, err := scalarString(v); err == nil {
			return s
		}
		b, _ := json.Marshal(v)
		return string(b)
	})
}

// oldJSONObjectWithout re-encodes the JSON object raw, compact, without its
// top-level keys in drop, the others in their order. It returns nil when
// no key is left.
func oldJSONObjectWithout(raw []byte, drop map[string]bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("the input is not a JSON object")
	}
	var out bytes.Buffer
	var val json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		if drop[key] {
			continue
		}
		if out.Len() == 0 {
			out.WriteByte('{')
		} else {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		out.Write(kb)
		out.WriteByte(':')
		if err := json.Compact(&out, val); err != nil {
			return nil, err
		}
	}
	if out.Len() == 0 {
		return nil, nil
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

func oldCompact(raw []byte) ([]byte, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return nil, err
	}
	return c.Bytes(), nil
}

var diffDrop = map[string]bool{"a": true, "id": true, "<&>": true, "\u2028": true}

var diffTemplates = []string{"", "plain", "{a}", "x={a}&y={b}:{id}{missing}{}{a-b}", "{obj}{arr}{n}{t}{nul}{s}{a}{a}"}

// meterCheck is a Meter that checks Body's contract: Grow sums to the
// body's length, never negative, and Tick comes at least every tickBytes
// of growth.
type meterCheck struct {
	grown, ticks, sinceTick int
	t                       *testing.T
}

func (mc *meterCheck) meter() Meter {
	return Meter{
		Tick: func() { mc.ticks++; mc.sinceTick = 0 },
		Grow: func(n int) bool {
			if n <= 0 {
				mc.t.Fatalf("Grow(%d)", n)
			}
			mc.grown += n
			mc.sinceTick += n
			return true
		},
	}
}

// diffBody checks the metered builders against the oracles on raw.
func diffBody(t *testing.T, raw []byte) {
	t.Helper()
	valid := json.Valid(raw)
	mc := &meterCheck{t: t}
	got, err := jsonObjectWithout(raw, diffDrop, mc.meter())
	want, wantErr := oldJSONObjectWithout(raw, diffDrop)
	isObj := valid && bytes.TrimLeft(raw, " \t\r\n")[0] == '{'
	switch {
	case isObj && (err != nil || wantErr != nil || !bytes.Equal(got, want)):
		t.Fatalf("jsonObjectWithout(%q):\n got %q, %v\nwant %q, %v", raw, got, err, want, wantErr)
	case !isObj && err == nil:
		t.Fatalf("jsonObjectWithout(%q): %q, no error for an input that is not a JSON object", raw, got)
	case err == nil && mc.grown != len(got):
		t.Fatalf("jsonObjectWithout(%q): Grow summed to %d, body %d bytes", raw, mc.grown, len(got))
	}
	mc = &meterCheck{t: t}
	got, err = compactJSON(raw, mc.meter())
	want, wantErr = oldCompact(raw)
	if (err == nil) != valid || (wantErr == nil) != valid || !bytes.Equal(got, want) || err == nil && mc.grown != len(got) {
		t.Fatalf("compactJSON(%q):\n got %q, %v\nwant %q, %v (grown %d)", raw, got, err, want, wantErr, mc.grown)
	}
	if !valid {
		return
	}
	v, err := manifest.DecodeValue(raw, nil)
	if err != nil {
		return // deeper than manifest's decoder takes: never a validated input
	}
	in, _ := v.(map[string]any)
	for _, tmpl := range diffTemplates {
		mc = &meterCheck{t: t}
		got, err := parseTextTemplate(tmpl).fill(in, mc.meter())
		if want := oldFillText(tmpl, in); err != nil || string(got) != want || mc.grown != len(got) {
			t.Fatalf("text %q on %q:\n got %q, %v\nwant %q", tmpl, raw, got, err, want)
		}
	}
}

var diffSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"b":2}`, `{"b" : [ 1 , 2 , {"x" : "y z"} ] , "a" : "q"}`,
	`{"k":"v","k":"w"}`, `{"<&>":1,"<&>x":{"<":">"}}`, `{"\u003c":1, "\/\b\f\n\r\t\"\\":2}`,
	`{"\ud83d\ude00":1,"\ud800":2,"\udc00\ud800":3,"\ud800\u0041":4,"\ud800x":5}`,
	"{\"\u2028\u2029\":\"\u2028\"}", "{\"\xff\xfe\":1,\"\xed\xa0\x80\":2}", `{"s":"\u0000\u001f\u007f"}`,
	`{"n":-0.5e+10,"m":0,"o":1E-2,"p":123456789012345678901234567890}`, `{"t":true,"f":false,"nul":null}`,
	`{"obj":{"z":1,"a":[1,"<b>",null],"\u2028":"\u0007"},"arr":[[],{}],"n":1.50,"t":true,"nul":null,"s":"<s>"}`,
	`[1,2]`, `"str"`, `12`, `null`, ``, ` `, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a":1 "b":2}`,
	`{"a":1} x`, `{"a":1}{}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`,
	"{\"a\":\"\n\"}", `{"a":[1,]}`, `{"a":[1 2]}`, `{1:2}`, `{"a"1}`, `[`, `]`, `{"a":{"b":}}`,
}

func TestBodyMatchesOld(t *testing.T) {
	for _, s := range diffSeeds {
		diffBody(t, []byte(s))
	}
	r := rand.New(rand.NewPCG(24, 1))
	for range 3000 {
		diffBody(t, randomObject(r))
	}
}

// TestBodyMatchesOldTicking is TestBodyMatchesOld with a meter point after
// every byte of work.
func TestBodyMatchesOldTicking(t *testing.T) {
	old := tickBytes
	tickBytes = 1
	defer func() { tickBytes = old }()
	TestBodyMatchesOld(t)
}

func FuzzBodyMatchesOld(f *testing.F) {
	for _, s := range diffSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 {
			return
		}
		diffBody(t, raw)
	})
}

// randomObject is a JSON object of random members, with random whitespace
// and string escapes, now and then broken.
func randomObject(r *rand.Rand) []byte {
	var b bytes.Buffer
	ws := func() {
		for r.IntN(4) == 0 {
			b.WriteByte(" \t\r\n"[r.IntN(4)])
		}
	}
	str := func() {
		b.WriteByte('"')
		for n := r.IntN(6); n > 0; n-- {
			pieces := []string{"a", "id", "<", "&", ">", `\u003c`, `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\u0008`, `\u0000`,
				"\u2028", `\u2029`, "é", "\xff", `\ud83d\ude00`, `\ud800`, `\udfff`, "\x7f", `\u00e9`, " "}
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		b.WriteByte('"')
	}
	var value func(depth int)
	value = func(depth int) {
		ws()
		switch k := r.IntN(8); {
		case k == 0 && depth < 4:
			b.WriteByte('{')
			for i := r.IntN(4); i > 0; i-- {
				ws()
				str()
				ws()
				b.WriteByte(':')
				value(depth + 1)
				if i > 1 {
					b.WriteByte(',')
				}
			}
			ws()
			b.WriteByte('}')
		case k == 1 && depth < 4:
			b.WriteByte('[')
			for i := r.IntN(4); i > 0; i-- {
				value(depth + 1)
				if i > 1 {
					b.WriteByte(',')
				}
			}
			b.WriteByte(']')
		case k == 2:
			b.WriteString([]string{"0", "-1", "1.50", "2e10", "-0.0E-3", "123456789012345678901234567890"}[r.IntN(6)])
		case k == 3:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		default:
			str()
		}
		ws()
	}
	keys := []string{`"a"`, `"b"`, `"id"`, `"s"`, `"obj"`, `"arr"`, `"\u0061"`, `"<&>"`, `"\u2028"`}
	ws()
	b.WriteByte('{')
	for i := r.IntN(5); i > 0; i-- {
		ws()
		if r.IntN(2) == 0 {
			b.WriteString(keys[r.IntN(len(keys))])
		} else {
			str()
		}
		ws()
		b.WriteByte(':')
		value(0)
		if i > 1 {
			b.WriteByte(',')
		}
	}
	b.WriteByte('}')
	ws()
	out := b.Bytes()
	if r.IntN(10) == 0 && len(out) > 1 { // broken: cut or one byte changed
		if r.IntN(2) == 0 {
			out = out[:r.IntN(len(out))]
		} else {
			out[r.IntN(len(out))] = "{}[],:\"\\x0 "[r.IntN(11)]
		}
	}
	return out
}

// TestBodyMeterStops: a Tick's panic passes through Body; a refused Grow
// stops it with a *BodyTooLargeError; over 1 MiB of work, a Tick at
// least every 64 KiB.
func TestBodyMeterStops(t *testing.T) {
	big := []byte(`{"a":1,"k` + strings.Repeat("<", 1<<20) + `":"` + strings.Repeat("x", 1<<20) + `"}`)
	s := &Spec{Method: "POST", bodyKind: "json-input"}
	ticks := 0
	body, _, err := s.Body(big, nil, Meter{Tick: func() { ticks++ }})
	if err != nil || len(body) != 6*(1<<20)+(1<<20)+14 {
		t.Fatalf("body %d bytes, %v", len(body), err)
	}
	// 1 MiB of key read, 6 MiB written; 1 MiB of value read and written.
	if ticks < (9<<20)/tickBytes-1 {
		t.Errorf("%d ticks over 9 MiB of work; want one per %d bytes", ticks, tickBytes)
	}
	type stop struct{}
	func() {
		defer func() {
			if r := recover(); r != (stop{}) {
				t.Errorf("recovered %v; want the Tick's panic", r)
			}
		}()
		_, _, _ = s.Body(big, nil, Meter{Tick: func() { panic(stop{}) }})
	}()
	grown := 0
	_, _, err = s.Body(big, nil, Meter{Grow: func(n int) bool { grown += n; return grown <= 1<<20 }})
	var tl *BodyTooLargeError
	if !errors.As(err, &tl) || tl.Size <= 1<<20 || tl.Size > 1<<20+2*6*tickBytes {
		t.Errorf("err %v (%+v); want a *BodyTooLargeError just past 1 MiB", err, tl)
	}
	// A text template repeating a large value is refused as it grows.
	ts := &Spec{bodyKind: "text", text: parseTextTemplate(strings.Repeat("{s}", 1000))}
	grown = 0
	_, _, err = ts.Body(nil, map[string]any{"s": strings.Repeat("y", 1<<20)}, Meter{Grow: func(n int) bool { grown += n; return grown <= 8<<20 }})
	if !errors.As(err, &tl) || tl.Size > 8<<20+2*tickBytes {
		t.Errorf("text: err %v (%+v); want a *BodyTooLargeError just past 8 MiB", err, tl)
	}
}

// BenchmarkBody compares the metered builders with the old ones on a
// 4 MiB object of many members and on one 4 MiB string member.
func BenchmarkBody(b *testing.B) {
	var many bytes.Buffer
	many.WriteString("{")
	for i := 0; many.Len() < 4<<20; i++ {
		if i > 0 {
			many.WriteString(", ")
		}
		many.WriteString(`"key` + strings.Repeat("k", i%7) + `": {"n": 12.5, "s": "some text <b>", "a": [1, true, null]}`)
	}
	many.WriteString("}")
	one := []byte(`{"a": "` + strings.Repeat("x", 4<<20) + `"}`)
	m := Meter{Tick: func() {}, Grow: func(int) bool { return true }}
	drop := map[string]bool{"id": true}
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"many", many.Bytes()}, {"string", one}} {
		b.Run(c.name+"/old", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := oldJSONObjectWithout(c.raw, drop); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/metered", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := jsonObjectWithout(c.raw, drop, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/compact-old", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := oldCompact(c.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/compact-metered", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.raw)))
			for b.Loop() {
				if _, err := compactJSON(c.raw, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
