package executor_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// README.md's "Embedding" snippet, complete: load a manifest whose
// filesystem ref names a module beside it, and call the tool. (The
// compilation cache is in memory here; the default is a persistent cache in
// the user cache directory.)
func Example() {
	ctx := context.Background()
	manifestJSON := []byte(`{
		"id": "acme.echo", "version": "1.0.0", "description": "Returns its input.",
		"input": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
		"output": {"type": "object"},
		"limits": {"memMB": 16, "cpuMs": 1000},
		"codeArtifactRef": {"kind": "filesystem", "modulePath": "echo_reactor.wasm"}
	}`)
	dir := "../testdata/wasm"

	exec, err := executor.New(ctx, executor.NewConfig().WithDevMode(true).WithCacheDir(""))
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Close(ctx)
	tool, err := exec.Load(ctx, manifestJSON, executor.WithBaseDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer tool.Close(ctx)

	cc := executor.CallContext{TenantID: "t1", RunID: "r1"}
	res, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{"message":"hi"}`), Context: cc})
	fmt.Println(string(res.Output), err)

	// Every failure is a *toolerr.Error: branch on its code.
	_, err = tool.Invoke(ctx, executor.Request{Input: []byte(`{}`), Context: cc})
	fmt.Println(errors.Is(err, toolerr.InputValidationFailed))
	fmt.Println(err)
	// Output:
	// {"message":"hi"} <nil>
	// true
	// input-validation-failed: input must have required property 'message'
}
