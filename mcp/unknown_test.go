package mcp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

// stdioClient connects the go-sdk client to ServeStdio over a pair of
// pipes (what sandboxd mcp does with its stdin and stdout).
func stdioClient(t *testing.T, f *fixture, version string) *sdk.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()   // client → server
	outR, outW := io.Pipe() // server → client
	done := make(chan error, 1)
	go func() { done <- f.mcp.ServeStdio(context.Background(), inR, outW); outW.Close() }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil).Connect(context.Background(),
		&sdk.IOTransport{Reader: outR, Writer: inW}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		inW.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	})
	return cs
}

type bearer struct{ tok string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// httpClient connects the go-sdk client to Handler over Streamable HTTP
// on a loopback listener.
func httpClient(t *testing.T, f *fixture, version string) *sdk.ClientSession {
	t.Helper()
	ts := httptest.NewServer(f.core)
	t.Cleanup(ts.Close)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A tools/call of a tool the server does not list answers -32602 with the
// nearest listed name (the words /v1/invoke's tool-not-in-pack uses) and
// where the names are, over stdio and Streamable HTTP, both revisions.
func TestMessagesMCPUnknownTool(t *testing.T) {
	f := newFixture(t, tools(t), server.Options{})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	for _, tr := range []struct {
		name    string
		connect func(*testing.T, *fixture, string) *sdk.ClientSession
	}{{"stdio", stdioClient}, {"http", httpClient}} {
		for _, version := range []string{"2026-07-28", "2025-11-25"} {
			t.Run(tr.name+"/"+version, func(t *testing.T) {
				cs := tr.connect(t, f, version)
				for _, tc := range []struct{ tool, want string }{
					{"acme.ecko", `unknown tool "acme.ecko" (did you mean "acme.echo"?); tools/list lists the tools`},
					{"T.SPIN", `unknown tool "T.SPIN" (did you mean "t.spin"?); tools/list lists the tools`},
					{"no.such", `unknown tool "no.such"; tools/list lists the tools`},
				} {
					_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tc.tool, Arguments: map[string]any{}})
					var we *jsonrpc.Error
					if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || we.Message != tc.want {
						t.Errorf("%s: %v (%T)\nwant -32602 %s", tc.tool, err, err, tc.want)
					}
				}
				// The listed tools still answer.
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "acme.echo", Arguments: map[string]any{"message": "k"}})
				if err != nil || res.IsError {
					t.Fatalf("echo: %v %+v", err, res)
				}
			})
		}
	}
}
