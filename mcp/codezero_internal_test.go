package mcp

import (
	"net/http/httptest"
	"testing"
)

// rewriteCodeZero on the shapes the SDK writes over Streamable HTTP: an
// SSE event, a JSON body, a batch; results that merely contain the bytes
// of a code-0 error pass unchanged.
func TestRewriteCodeZero(t *testing.T) {
	const (
		zero  = `{"jsonrpc":"2.0","id":7,"error":{"code":0,"message":"duplicate \"initialize\" received"}}`
		fixed = `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"duplicate \"initialize\" received"}}`
		inner = `{"jsonrpc":"2.0","id":8,"result":{"content":[],"structuredContent":{"error":{"code":0}}}}`
	)
	for _, tc := range []struct{ name, in, want string }{
		{"sse event", "event: message\nid: 1_0\ndata: " + zero + "\n\n", "event: message\nid: 1_0\ndata: " + fixed + "\n\n"},
		{"sse data without a space", "data:" + zero + "\r\n\r\n", "data:" + fixed + "\r\n\r\n"},
		{"json body", zero, fixed},
		{"batch", "[" + inner + "," + zero + "]", "[" + inner + "," + fixed + "]"},
		{"a result that contains the bytes", "data: " + inner + "\n\n", ""},
		{"not JSON-RPC", `{"error":{"code":0}}`, ""},
		{"a real code", `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}`, ""},
	} {
		got, ok := rewriteCodeZero([]byte(tc.in))
		if tc.want == "" {
			if ok {
				t.Errorf("%s: rewrote %q to %q", tc.name, tc.in, got)
			}
			continue
		}
		if !ok || string(got) != tc.want {
			t.Errorf("%s: %q (%v)\nwant %q", tc.name, got, ok, tc.want)
		}
	}

	rr := httptest.NewRecorder()
	w := codeZeroWriter{rr}
	if n, err := w.Write([]byte("data: " + zero + "\n\n")); err != nil || n != len("data: "+zero+"\n\n") {
		t.Errorf("Write = %d, %v: want the length the SDK gave", n, err)
	}
	if rr.Body.String() != "data: "+fixed+"\n\n" {
		t.Errorf("written %q", rr.Body.String())
	}
}

func TestProperError(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		code int64
		want string
	}{
		{`method "tools/list" is invalid during session initialization`, -32600, `method "tools/list" is invalid during session initialization: send initialize (and notifications/initialized) first`},
		{`handling 'initialize': missing required "params"`, -32602, `handling 'initialize': missing required "params": initialize params must be an object with protocolVersion, capabilities and clientInfo`},
		{`handling 'tools/call': unmarshaling "1" into a *mcp.CallToolParamsRaw: x`, -32602, `handling 'tools/call': unmarshaling "1" into a *mcp.CallToolParamsRaw: x`},
		{"context canceled", -32800, "request cancelled (notifications/cancelled) before it ran"},
		{`duplicate "initialize" received`, -32600, `duplicate "initialize" received`},
		{"anything else", -32600, "anything else"},
	} {
		if code, msg := properError(tc.msg); code != tc.code || msg != tc.want {
			t.Errorf("properError(%q) = %d %q, want %d %q", tc.msg, code, msg, tc.code, tc.want)
		}
	}
}
