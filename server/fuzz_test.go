package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/server"
)

// FuzzInvokeFrame sends arbitrary bodies to /v1/invoke (in memory, through
// ServeHTTP): the server never panics or hangs, and every 200 answer is a
// valid pack-protocol response.
func FuzzInvokeFrame(f *testing.F) {
	for _, s := range []string{
		invokeBody("acme.echo", `{"message":"x"}`),
		invokeBody("acme.echo", `{"message":1}`),
		invokeBody("nope", `{}`),
		`{"v":2,"kind":"check-invoke","check":{"id":"c"},"config":{},"trace":null}`,
		`{"v":2.0,"kind":"invoke","tool":{"id":"acme.echo","version":"1.0.0"},"input":{"message":"y","repeat":2},"ctx":{"tenantId":"t","runId":"r","x":[]}}`,
		`{"v":1e0}`, `[]`, `"`, `{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{},"ctx":{"tenantId":"t","runId":"r","secrets":{"a":{"b":1}}}}`,
	} {
		f.Add(s)
	}
	exec, err := executor.New(context.Background(), executor.NewConfig().WithCacheDir(sandboxtest.CacheDir(f)))
	if err != nil {
		f.Fatal(err)
	}
	defer exec.Close(context.Background())
	srv, err := server.New(context.Background(), exec, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{Token: token})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close(context.Background())
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/invoke", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", token)
		req.Header.Set("kindgi-timeout-ms", "5000")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		validate(t, "response", rec.Body.Bytes())
	})
}
