package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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

// deadlineWriter is a ResponseWriter with net/http's read deadline and
// flush (no-ops), dropping what is written.
type deadlineWriter struct{ h http.Header }

func (w *deadlineWriter) Header() http.Header             { return w.h }
func (w *deadlineWriter) Write(p []byte) (int, error)     { return len(p), nil }
func (w *deadlineWriter) WriteHeader(int)                 {}
func (w *deadlineWriter) SetReadDeadline(time.Time) error { return nil }
func (w *deadlineWriter) FlushError() error               { return nil }

// resettable is a request body that can be read again (Close does nothing).
type resettable struct{ bytes.Reader }

func (*resettable) Close() error { return nil }

// TestMeteredBodyAllocations: a /v1/invoke body's metering — meterBody,
// readAll, the flush through its controller, keep and the release — is
// two allocations: the metered request (body and request copy in one)
// and the body's bytes. It was five: the body, its controller, the
// request copy, the bytes and keep's method value.
func TestMeteredBodyAllocations(t *testing.T) {
	body := []byte(`{"v":2,"kind":"invoke","tool":{"id":"x"},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`)
	s := &Server{bodies: byteBudget{limit: 1 << 30}, opts: Options{BodyTimeout: time.Minute}}
	src := &resettable{}
	r := readRequest(t, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
	r.Body = src
	w := &deadlineWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		src.Reset(body)
		rb, r2 := s.meterBody(w, r, time.Now())
		if bodyOf(r2) != rb {
			t.Fatal("the handler's request does not read the metered body")
		}
		got, err := rb.readAll(bodyCharge, MaxBodyBytes)
		if err != nil || len(got) != len(body) {
			t.Fatalf("readAll: %d bytes, %v", len(got), err)
		}
		_ = rb.rc.Flush()
		rel := rb.keep()
		rb.handlerDone()
		if used, _ := s.bodies.stats(); used == 0 {
			t.Fatal("the kept charge was released with the handler")
		}
		rel.release()
	})
	if used, _ := s.bodies.stats(); used != 0 {
		t.Errorf("%d bytes still charged", used)
	}
	if allocs != 2 {
		t.Errorf("%v allocations per metered body, want 2", allocs)
	}
}
