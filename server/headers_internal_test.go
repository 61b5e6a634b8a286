package server

import (
	"bufio"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"
)

// readRequest parses raw as net/http's server does (it canonicalises the
// header names it receives).
func readRequest(t *testing.T, raw string) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestInvokeHeadersAsGet: the request headers a call reads are found by
// their canonical keys as Header.Get and Header.Values find them, however
// the client spelled the names, and absent ones are "".
func TestInvokeHeadersAsGet(t *testing.T) {
	for _, raw := range []string{
		"POST /v1/invoke HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nkindgi-pack-token: tok\r\nkindgi-timeout-ms: 50\r\n" +
			"kindgi-run-id: r1\r\nkindgi-request-id: q1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nContent-Length: 0\r\n\r\n",
		"POST /v1/invoke HTTP/1.1\r\nHost: x\r\nCONTENT-TYPE: application/json\r\nKindgi-Pack-Token: a\r\nKINDGI-PACK-TOKEN: b\r\nKindgi-Timeout-MS: 7\r\n" +
			"KINDGI-RUN-ID: r2\r\nKindgi-Request-Id: q2\r\nTraceParent: x\r\nContent-Length: 0\r\n\r\n",
		"POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
	} {
		r := readRequest(t, raw)
		for _, k := range []struct{ name, key string }{
			{HeaderTimeout, requestKeys.timeout}, {HeaderRunID, requestKeys.runID}, {HeaderRequestID, requestKeys.requestID},
			{HeaderTraceparent, requestKeys.traceparent}, {HeaderToken, requestKeys.token}, {"Content-Type", answerKeys.contentType},
		} {
			if got, want := headerValue(r.Header, k.key), r.Header.Get(k.name); got != want {
				t.Errorf("%s: headerValue %q, Header.Get %q", k.name, got, want)
			}
			if got, want := r.Header[k.key], r.Header.Values(k.name); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s: by key %q, Header.Values %q", k.name, got, want)
			}
		}
	}
}

// TestInvokeHeadersReadWithoutAllocating: checking the token and reading
// the headers every /v1/invoke reads allocate nothing (Header.Get and
// Values canonicalise their argument per call: a string for each name
// that is not one of textproto's common headers).
func TestInvokeHeadersReadWithoutAllocating(t *testing.T) {
	r := readRequest(t, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nkindgi-pack-token: tok\r\n"+
		"kindgi-timeout-ms: 50\r\nkindgi-run-id: r1\r\nContent-Length: 0\r\n\r\n")
	s := &Server{tokenSum: sha256.Sum256([]byte("tok"))}
	var sink int
	allocs := testing.AllocsPerRun(200, func() {
		if !s.authorized(r) {
			t.Fatal("the token is refused")
		}
		_, src := parseTimeout(headerValue(r.Header, requestKeys.timeout))
		trace, span := ParseTraceparent(headerValue(r.Header, requestKeys.traceparent))
		sink += int(src.Requested) + len(headerValue(r.Header, answerKeys.contentType)) + len(trace) + len(span) +
			len(headerValue(r.Header, requestKeys.runID)) + len(headerValue(r.Header, requestKeys.requestID))
	})
	if allocs != 0 {
		t.Errorf("%v allocations per call's header reads, want 0", allocs)
	}
	_ = sink
}
