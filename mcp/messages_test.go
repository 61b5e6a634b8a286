package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

// stdioSession writes lines to a stdio session and closes its input at
// once (printf … | sandboxd mcp); it returns every answer by id.
func stdioSession(t *testing.T, f *fixture, lines ...string) map[string]json.RawMessage {
	t.Helper()
	in := strings.NewReader(strings.Join(lines, "\n") + "\n")
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- f.mcp.ServeStdio(context.Background(), in, &out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio did not return at the end of its input")
	}
	answers := map[string]json.RawMessage{}
	for l := range bytes.SplitSeq(bytes.TrimSpace(out.Bytes()), []byte{'\n'}) {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("stdout line is not JSON: %q", l)
		}
		answers[string(m.ID)] = append(json.RawMessage(nil), l...)
	}
	return answers
}

const initLines = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`

// Golden texts of the MCP path: the deadline's source, issue lines that
// name their property, no code 0 before initialize, and every call read
// before the end of stdin answered.
func TestMessagesMCPStdio(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	got := stdioSession(t, f, initLines,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme.echo","arguments":{"txt":"a"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t.spin","arguments":{},"_meta":{"io.github.sandboxd/timeoutMs":200}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"last"}}}`,
	)
	text := func(id string) string {
		var m struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(got[id], &m); err != nil || len(m.Result.Content) == 0 {
			t.Fatalf("answer %s: %s (%v)", id, got[id], err)
		}
		return m.Result.Content[0].Text
	}
	if want := "input-validation-failed: input must have required property 'message'; input must NOT have additional properties (\"txt\")\n" +
		"- at /: must have required property 'message'\n" +
		"- at /: must NOT have additional properties (additionalProperty \"txt\")"; text("1") != want {
		t.Errorf("issues text\n got %q\nwant %q", text("1"), want)
	}
	if want := `deadline-exceeded: the call ran past its 200ms deadline (_meta "io.github.sandboxd/timeoutMs": 200)`; text("2") != want {
		t.Errorf("deadline text\n got %q\nwant %q", text("2"), want)
	}
	if !strings.Contains(text("3"), "last") {
		t.Errorf("the last call read before EOF was not answered: %s", got["3"])
	}
}

func TestMessagesMCPBeforeInitialize(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	got := stdioSession(t, f, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"method \"tools/list\" is invalid during session initialization: send initialize (and notifications/initialized) first"}}`
	if string(got["1"]) != want {
		t.Fatalf("answer\n got %s\nwant %s", got["1"], want)
	}
}

// rawMCP sends one raw JSON-RPC body to /mcp (no initialize before it)
// with the headers hdr (name, value pairs) and returns the status and the
// one JSON-RPC message of the answer (the data of an SSE event, or the
// body), or the body as it is when it has none.
func rawMCP(t *testing.T, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for l := range strings.SplitSeq(string(b), "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			return res.StatusCode, d
		}
	}
	return res.StatusCode, strings.TrimSpace(string(b))
}

// Streamable HTTP before initialize. The handler is stateless (docs/mcp.md
// "Protocol revisions"): it issues no Mcp-Session-Id, so no request can
// be tied to an earlier initialize, and a 2025-11-25 client (the go-sdk's,
// the TypeScript SDK's) sends tools/list and tools/call in POSTs of their
// own after the one that carried initialize. Such a request is served,
// with or without an Mcp-Session-Id header (one this server never issued
// names no state: it is ignored), and never answered with code 0.
func TestMessagesMCPHTTPBeforeInitialize(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"pre"}}}`
	for _, tc := range []struct {
		name, body string
		hdr        []string
		want       string
	}{
		{"tools/list", list, nil, `"name":"acme.echo"`},
		{"tools/list 2025-11-25", list, []string{"MCP-Protocol-Version", "2025-11-25"}, `"name":"acme.echo"`},
		{"tools/list with a session id", list, []string{"MCP-Protocol-Version", "2025-11-25", "Mcp-Session-Id", "never-issued"}, `"name":"acme.echo"`},
		{"tools/call", call, nil, `"structuredContent":{"echo":"pre","length":3}`},
		{"tools/call with a session id", call, []string{"Mcp-Session-Id", "never-issued"}, `"structuredContent":{"echo":"pre","length":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg := rawMCP(t, ts.URL+"/mcp", tc.body, tc.hdr...)
			if st != 200 || !strings.Contains(msg, tc.want) || strings.Contains(msg, `"error"`) {
				t.Errorf("status %d: %.300s\nwant 200 with %s", st, msg, tc.want)
			}
		})
	}
}

// The SDK answers some requests with a plain Go error, code 0 on the wire;
// sandboxd maps each to a real code that says what to change, on both
// transports.
func TestMessagesMCPNoCodeZero(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	const initHint = `: initialize params must be an object with protocolVersion, capabilities and clientInfo`
	badInit := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}`
	nullInit := `{"jsonrpc":"2.0","id":2,"method":"initialize","params":null}`
	wantBad := `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"handling 'initialize': unmarshaling \"\\\"x\\\"\" into a *mcp.initializeParamsV2: json: cannot unmarshal \"\\\"x\\\"\" into Go value of type mcp.initializeParamsV2` + initHint + `"}}`
	wantNull := `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"handling 'initialize': missing required \"params\"` + initHint + `"}}`
	for _, tc := range []struct{ body, want string }{{badInit, wantBad}, {nullInit, wantNull}} {
		if st, msg := rawMCP(t, ts.URL+"/mcp", tc.body); msg != tc.want {
			t.Errorf("HTTP %s: status %d\n got %s\nwant %s", tc.body, st, msg, tc.want)
		}
	}

	got := stdioSession(t, f, badInit, nullInit, initLines,
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	for id, want := range map[string]string{
		"1": wantBad,
		"2": wantNull,
		"3": `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"duplicate \"initialize\" received"}}`,
	} {
		if string(got[id]) != want {
			t.Errorf("stdio answer %s\n got %s\nwant %s", id, got[id], want)
		}
	}
}

// gauge reads one unlabelled gauge from the core's /metrics (-1: absent).
func gauge(core *server.Server, name string) int {
	rr := httptest.NewRecorder()
	core.ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	for l := range strings.SplitSeq(rr.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// A call the client cancels (notifications/cancelled) is answered with a
// real code wherever the cancellation finds it: waiting for a slot or
// running, isError "cancelled"; before the SDK handed it to sandboxd,
// -32800. Before, a call cancelled in the queue was answered with the
// context's error (code 0, which stdio turned into -32600 "context
// canceled").
func TestMessagesMCPCancelled(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{MaxConcurrency: 1})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- f.mcp.ServeStdio(context.Background(), inR, outW); outW.Close() }()
	answers := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			answers <- sc.Text()
		}
		close(answers)
	}()
	send := func(lines ...string) {
		t.Helper()
		if _, err := io.WriteString(inW, strings.Join(lines, "\n")+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func(id string) string {
		t.Helper()
		for {
			select {
			case a, ok := <-answers:
				if !ok {
					t.Fatalf("stdout closed before answer %s", id)
				}
				if strings.HasPrefix(a, `{"jsonrpc":"2.0","id":`+id+`,`) {
					if strings.Contains(a, `"code":0`) {
						t.Errorf("answer %s has code 0: %s", id, a)
					}
					return a
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no answer %s", id)
			}
		}
	}
	spin := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"t.spin","arguments":{},"_meta":{"io.github.sandboxd/timeoutMs":60000}}}`
	}
	cancel := func(id string) string {
		return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`
	}
	const (
		queued  = `"content":[{"type":"text","text":"cancelled: the caller went away while the call waited for a slot"}],"isError":true`
		running = `"content":[{"type":"text","text":"cancelled: the call was cancelled`
		early   = `"error":{"code":-32800,"message":"request cancelled (notifications/cancelled) before it ran"}`
	)
	send(initLines)
	next("0")
	send(spin("4"))
	waitFor(t, "call 4 running", func() bool { return inflight(f.core) == 1 })
	send(spin("5"))
	waitFor(t, "call 5 queued", func() bool { return gauge(f.core, "sandboxd_queue_depth") == 1 })
	send(cancel("5"))
	if a := next("5"); !strings.Contains(a, queued) {
		t.Errorf("call cancelled in the queue: %s\nwant %s", a, queued)
	}
	send(cancel("4"))
	if a := next("4"); !strings.Contains(a, running) || !strings.Contains(a, `"isError":true`) {
		t.Errorf("call cancelled while it ran: %s\nwant %s…", a, running)
	}
	// Cancelled at once: where the cancellation finds it is a race; the
	// answer is one of the three, never code 0.
	send(spin("6"), cancel("6"))
	if a := next("6"); !strings.Contains(a, early) && !strings.Contains(a, running) && !strings.Contains(a, queued) {
		t.Errorf("call cancelled at once: %s", a)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeStdio: %v", err)
	}
}
