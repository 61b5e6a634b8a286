package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzUnquoteJSONString: unquoteJSONString agrees with json.Unmarshal into
// a string on every JSON string (and refuses every non-string), with a tick
// after every hostChunk bytes.
func FuzzUnquoteJSONString(f *testing.F) {
	for _, s := range []string{`"abc"`, ` "a\"b\\c\/\b\f\n\r\t" `, `"\u00e9\ud83d\ude00\ud800x\udc00"`, "\"\xff\xfe\"", `"\u12"`, `"a" x`, `null`, `1`, `"`, `"\x"`, "\"a\nb\"", `""`,
		`"` + strings.Repeat("x", hostChunk+3) + `\n"`, `"` + strings.Repeat("é", hostChunk) + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ticks := 0
		got, ok := unquoteJSONString(b, func() { ticks++ })
		var want string
		err := json.Unmarshal(b, &want)
		isString := err == nil && bytes.TrimLeft(b, " \t\r\n")[0] == '"'
		if ok != isString {
			t.Fatalf("%q: ok %v, json.Unmarshal: %v", b, ok, err)
		}
		if ok && string(got) != want {
			t.Fatalf("%q: %q, json.Unmarshal: %q", b, got, want)
		}
		if max := len(b) / hostChunk; ticks > max {
			t.Fatalf("%d bytes: %d ticks, want at most %d", len(b), ticks, max)
		}
		if ok && len(b) > 2*hostChunk && ticks == 0 {
			t.Fatalf("%d bytes: no tick", len(b))
		}
	})
}
