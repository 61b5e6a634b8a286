package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	stream := `{"Action":"start","Package":"github.com/sandboxd/sandboxd/a"}
{"Action":"run","Package":"github.com/sandboxd/sandboxd/a","Test":"TestOK"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"github.com/sandboxd/sandboxd/a","Test":"TestOK"}
{"Action":"run","Package":"github.com/sandboxd/sandboxd/a","Test":"TestWat"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestWat","Output":"    a_test.go:12: wat2wasm is not installed (apt-get install wabt)\n"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestWat","Output":"--- SKIP: TestWat (0.00s)\n"}
{"Action":"skip","Package":"github.com/sandboxd/sandboxd/a","Test":"TestWat"}
{"Action":"run","Package":"github.com/sandboxd/sandboxd/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestBad","Output":"    a_test.go:20: boom\n"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"github.com/sandboxd/sandboxd/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Output":"FAIL\n"}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/a","Output":"FAIL\tgithub.com/sandboxd/sandboxd/a\t0.01s\n"}
{"Action":"fail","Package":"github.com/sandboxd/sandboxd/a","Elapsed":0.01}
{"Action":"output","Package":"github.com/sandboxd/sandboxd/b","Output":"ok  \tgithub.com/sandboxd/sandboxd/b\t0.01s\n"}
{"Action":"pass","Package":"github.com/sandboxd/sandboxd/b","Elapsed":1.52}
`
	var out bytes.Buffer
	s := newSummary(&out)
	s.read(strings.NewReader(stream))
	s.close()
	got := out.String()
	for _, want := range []string{
		"a_test.go:20: boom", "--- FAIL: TestBad", "FAIL\tgithub.com/sandboxd/sandboxd/a", "ok  \tgithub.com/sandboxd/sandboxd/b",
		"  1  wat2wasm is not installed (apt-get install wabt)  (a.TestWat)",
		"\nslowest packages: b 1.5s, a 0.0s\n",
		"\ntests: 1 passed, 1 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "PASS: TestOK") || !s.pkgFailed {
		t.Errorf("passing test output shown or package failure missed:\n%s", got)
	}
}

// The reason is the skip's own line, not a t.Log line before it (the
// summary grouped cmd/sandboxd.TestServeEnvelope under the first boot
// problem it logged, "tampered index: …"), and only the first line of a
// multi-line message.
func TestSkipReasonIsTheLastLogLine(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"    serve_pack_test.go:106: tampered index: [map[code:image-unverifiable]]\n",
			"    serve_pack_test.go:106: untrusted signer: [map[code:signer-not-trusted]]\n",
			"    serve_pack_test.go:109: -short: builds the sandboxd binary\n",
			"--- SKIP: TestServeEnvelope (0.02s)\n"}, "-short: builds the sandboxd binary"},
		{[]string{"    a_test.go:12: wat2wasm is not installed\n", "        second line of the message\n",
			"--- SKIP: TestWat (0.00s)\n"}, "wat2wasm is not installed"},
		{[]string{"printed without a prefix\n", "--- SKIP: TestX (0.00s)\n"}, "printed without a prefix"},
		{[]string{"--- SKIP: TestX (0.00s)\n"}, "(no reason given)"},
	} {
		if got := skipReason(tc.lines); got != tc.want {
			t.Errorf("skipReason(%q) = %q, want %q", tc.lines, got, tc.want)
		}
	}
}
