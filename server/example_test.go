package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// A pack service with one tool, answering one invoke.
func Example() {
	ctx := context.Background()
	exec, _ := executor.New(ctx, executor.NewConfig().WithCacheDir(""))
	defer exec.Close(ctx)
	wasm, _ := os.ReadFile("../testdata/wasm/counter.wasm")
	manifest := `{"id":"demo.counter","version":"1.0.0","description":"counts","input":{},"output":{},
		"codeArtifactRef":{"kind":"filesystem","modulePath":"counter.wasm"}}`
	srv, err := server.New(ctx, exec, server.StaticSource{
		Tools:  []server.StaticTool{{Manifest: []byte(manifest), Module: wasm}},
		PackID: "demo", PackVersion: "1.0.0", ArtifactVersion: "1",
	}, server.Options{Token: "t0ken"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close(ctx)
	hs := httptest.NewServer(srv) // or srv.Serve(ctx, listener) for the drain lifecycle
	defer hs.Close()

	req, _ := http.NewRequest("POST", hs.URL+"/v1/invoke", strings.NewReader(
		`{"v":2,"kind":"invoke","tool":{"id":"demo.counter"},"input":{},"ctx":{"tenantId":"t1","runId":"r1"}}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("kindgi-pack-token", "t0ken")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, res.Header.Get("kindgi-artifact-version"), strings.TrimSpace(string(body)))
	// Output: 200 1 {"v":2,"kind":"result","output":{"count":1}}
}
