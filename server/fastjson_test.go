package server

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// checkSplit fails when splitObject accepts b but json.Unmarshal into a
// map[string]json.RawMessage refuses it or gives other members, and
// likewise for plainString.
func checkSplit(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	m, ok := splitObject(b)
	var want map[string]json.RawMessage
	err := json.Unmarshal(b, &want)
	if ok {
		if err != nil {
			t.Fatalf("splitObject accepted %q, encoding/json: %v", b, err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("splitObject(%q) = %q, encoding/json %q", b, m, want)
		}
	}
	if s, ok := plainString(b); ok {
		var w string
		if err := json.Unmarshal(b, &w); err != nil || w != s {
			t.Fatalf("plainString(%q) = %q, encoding/json %q %v", b, s, w, err)
		}
	}
	return ok
}

func TestSplitObjectAgreesWithEncodingJSON(t *testing.T) {
	fast := []string{
		`{}`, ` { } `, `{"v":2,"kind":"invoke","tool":{"id":"a.b"},"input":{"data":"` + strings.Repeat("x", 1024) + `"},"ctx":{"tenantId":"t1","runId":"r1"}}`,
		`{"a":1,"a":2}`, `{"a":[1,-0,0.5,1e9,-2E-3,true,false,null,"\u00e9\n\\\"\/"],"b":{"c":{}}}`,
		"{\"a\" : \"\xff\xfe\" ,\n\"b\":[ ]}\r\n", "{\"k\x7f\":1}",
	}
	for _, s := range fast {
		if !checkSplit(t, []byte(s)) {
			t.Errorf("fast path refused %q", s)
		}
	}
	slow := []string{
		``, `null`, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`,
		`{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", `{"a":1}x`, `{"a":1}{}`, `{"\u0061":1}`,
		"{\"é\":1}", `{"a":[1 2]}`, `{"a":{"b" 1}}`, `{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	}
	for _, s := range slow {
		if checkSplit(t, []byte(s)) {
			t.Errorf("fast path accepted %q", s)
		}
	}
	for _, s := range []string{`"a.b"`, `""`, `"\u0041"`, "\"\xff\"", `"a"b"`, `1`, `"`} {
		checkSplit(t, []byte(s))
	}
}

func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{"v":2,"kind":"invoke","tool":{"id":"x"},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`, `{"a":[1,{"b":null}]}`, `"s"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSplit(t, b) })
}

// BenchmarkSplitFrame compares the fast path with encoding/json on a 1 KiB
// invoke frame.
func BenchmarkSplitFrame(b *testing.B) {
	frame := []byte(`{"v":2,"kind":"invoke","tool":{"id":"bench.echo"},"input":{"data":"` + strings.Repeat("x", 1024) + `"},"ctx":{"tenantId":"t1","runId":"r1"}}`)
	b.Run("splitObject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := splitObject(frame); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(frame, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parseFrame", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, werr := parseFrame(frame); werr != nil {
				b.Fatal(werr)
			}
		}
	})
}

// TestParseFrameObjects: parseFrame reads members as json.Unmarshal into
// a map would: the last of duplicate keys wins, at every level, on the
// fast path and on the slow one (a key with an escape takes it).
func TestParseFrameObjects(t *testing.T) {
	for _, c := range []struct {
		frame, tool, tenant string
		kindErr             WireCode
	}{
		{`{"v":2,"kind":"invoke","tool":{"id":"a","id":"b"},"input":{},"ctx":{"tenantId":"t1","runId":"r","tenantId":"t2"}}`, "b", "t2", ""},
		{`{"v":2,"kind":"invoke","tool":{"id":"a","\u0069d":"b"},"input":{},"ctx":{"tenantId":"t1","runId":"r","tenant\u0049d":"t2"}}`, "b", "t2", ""},
		{`{"v":2,"kind":"invoke","kind":"nope","tool":{"id":"a"},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`, "", "", WireUnexpectedMessageKind},
		{`{"v":2,"kind":"invoke","tool":{"id":"a"},"input":{},"ctx":{"tenantId":"t","runId":"r"},"x":1}`, "", "", WireMalformedMessage},
		{`{"v":2,"kind":"invoke","tool":{"id":"a","x":1},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`, "", "", WireMalformedMessage},
		{`{"v":2,"kind":"invoke","tool":{"id":"a"},"input":{},"ctx":{"runId":"r"}}`, "", "", WireMalformedMessage},
		{`{"v":2,"kind":"invoke","tool":{"id":"a"},"input":{}}`, "", "", WireMalformedMessage},
		{`null`, "", "", WireMalformedMessage},
	} {
		inv, werr := parseFrame([]byte(c.frame))
		if c.kindErr != "" {
			if werr == nil || werr.Code != c.kindErr {
				t.Errorf("%s: %+v, want %s", c.frame, werr, c.kindErr)
			}
			continue
		}
		if werr != nil {
			t.Errorf("%s: %+v", c.frame, werr)
			continue
		}
		if inv.toolID != c.tool || inv.ctx.TenantID != c.tenant {
			t.Errorf("%s: tool %q tenant %q, want %q %q", c.frame, inv.toolID, inv.ctx.TenantID, c.tool, c.tenant)
		}
	}
}

// TestSpecial8: special8 answers, for any eight bytes, whether one of
// them is not a plainByte: every byte value at every position among
// plain, high (≥ 0x80) and special neighbours, and random words.
func TestSpecial8(t *testing.T) {
	ref := func(w [8]byte) bool {
		for _, c := range w {
			if !plainByte[c] {
				return true
			}
		}
		return false
	}
	check := func(w [8]byte) {
		if got, want := special8(binary.LittleEndian.Uint64(w[:])), ref(w); got != want {
			t.Fatalf("special8(%q) = %v, want %v", w[:], got, want)
		}
	}
	for _, fill := range []byte{'x', 0x80, 0xff, 0x21, 0x23, 0x5b, 0x5d, 0x20, 0x00, '"', '\\', 0x1f} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		check(w)
		for i := range w { // mostly plain, some special
			if rng.IntN(4) != 0 {
				w[i] = byte(0x20 + rng.IntN(0x60))
			}
		}
		check(w)
	}
}

// scanStringBytewise is scanString as it was, one byte at a time.
func scanStringBytewise(b []byte, i int) (int, bool) {
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case plainByte[c]:
			i++
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 6
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// TestScanStringAgreesBytewise: scanString, eight bytes at a time, ends
// every string where the byte-by-byte scan does (and fails where it
// does), for strings of every length up to 40 built from plain, high,
// escape, quote and control bytes at random.
func TestScanStringAgreesBytewise(t *testing.T) {
	alphabet := []byte("ab~ \x7f\x80\xc3\xa9\xff\"\\\\nu0Af\x01\x1f/")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300000 {
		b := make([]byte, 1+rng.IntN(40))
		b[0] = '"'
		for i := 1; i < len(b); i++ {
			if rng.IntN(3) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = 'x'
			}
		}
		e1, ok1 := scanString(b, 0)
		e2, ok2 := scanStringBytewise(b, 0)
		if e1 != e2 || ok1 != ok2 {
			t.Fatalf("scanString(%q) = %d %v, bytewise %d %v", b, e1, ok1, e2, ok2)
		}
	}
}

// BenchmarkScanString1KiB: the 1 KiB string of bench-serve's frame.
func BenchmarkScanString1KiB(b *testing.B) {
	s := []byte(`"` + strings.Repeat("x", 1024) + `"`)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if end, ok := scanString(s, 0); !ok || end != len(s) {
			b.Fatal(end, ok)
		}
	}
}

// TestParseFrameAllocatesOnlyItsStrings: parsing an invoke frame
// allocates its three strings (tool id, tenantId, runId) and nothing
// else: the invoke is returned as a value and no field of it is handed to
// json.Unmarshal, so neither it (288 bytes, with its call context) nor
// its kind goes to the heap. The slow paths still decode escaped values.
func TestParseFrameAllocatesOnlyItsStrings(t *testing.T) {
	frame := []byte(`{"v":2,"kind":"invoke","tool":{"id":"bench.echo"},"input":{"data":"` + strings.Repeat("x", 1024) + `"},"ctx":{"tenantId":"t1","runId":"r1"}}`)
	if a := testing.AllocsPerRun(200, func() {
		if _, werr := parseFrame(frame); werr != nil {
			t.Fatal(werr)
		}
	}); a != 3 {
		t.Errorf("%v allocations per frame, want 3", a)
	}
	inv, werr := parseFrame([]byte(`{"v":2,"kind":"\u0069nvoke","tool":{"id":"a\u002eb","version":"1\u002e0"},"input":{},` +
		`"ctx":{"tenantId":"t\u0031","runId":"r\u0031","orgId":"o\u0031","env":{"K":"v"},"config":{"c":1}}}`))
	if werr != nil {
		t.Fatal(werr)
	}
	if inv.toolID != "a.b" || inv.toolVersion != "1.0" || !inv.hasVersion || inv.ctx.TenantID != "t1" || inv.ctx.RunID != "r1" ||
		inv.ctx.OrgID != "o1" || inv.ctx.Env["K"] != "v" || string(inv.ctx.Config["c"]) != "1" {
		t.Errorf("escaped frame parsed as %+v", inv)
	}
}
