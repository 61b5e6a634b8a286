package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	for l := range bytes.SplitSeq(bytes.TrimSpace(out.b.Bytes()), []byte{'\n'}) {
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
