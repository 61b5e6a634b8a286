package manifest

import (
	"math/rand"
	"testing"
	"unicode/utf8"
)

// plainRun agrees with a byte-by-byte scan at every length and every
// position of every kind of stop byte.
func TestPlainRun(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				return i
			}
		}
		return len(b)
	}
	for n := 0; n <= 40; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, stop := range []byte{'"', '\\', 0, 0x1f, 0x7f + 1, 0xff, 'x'} {
				b := make([]byte, n)
				for i := range b {
					b[i] = 'a' + byte(i%26)
				}
				if pos < n {
					b[pos] = stop
				}
				if got, want := plainRun(b), naive(b); got != want {
					t.Fatalf("plainRun(%q) = %d, want %d", b, got, want)
				}
			}
		}
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.Intn(64))
		for j := range b {
			b[j] = byte(0x20 + r.Intn(0x60))
			if r.Intn(40) == 0 {
				b[j] = byte(r.Intn(256))
			}
		}
		if got, want := plainRun(b), naive(b); got != want {
			t.Fatalf("plainRun(%q) = %d, want %d", b, got, want)
		}
	}
}

// Validation borrows the document's bytes, yet nothing it returns changes
// when the caller reuses the buffer afterwards.
func TestValidateDoesNotAliasDocument(t *testing.T) {
	tool := mustLoad(t, `{"type":"object","properties":{"a":{"enum":["x"]},"d":{"type":"string","default":"dd"}},"additionalProperties":false}`)
	doc := []byte(`{"a":"zzzz","extraKey":"vvvv"}`)
	_, err := tool.ValidateInput(doc)
	if err == nil {
		t.Fatal("invalid input accepted")
	}
	before := err.Error()
	for i := range doc {
		doc[i] = 'Q'
	}
	if after := err.Error(); after != before {
		t.Fatalf("issues changed with the buffer: %q then %q", before, after)
	}
	doc = []byte(`{"a":"x"}`)
	out, err := tool.ValidateInput(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := string(out)
	copy(doc, `{"a":"y"}`)
	if string(out) != want || want != `{"a":"x","d":"dd"}` {
		t.Fatalf("filled output %q changed to %q", want, out)
	}
}
