package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// callerCtx is cancelled at the k-th Err check made from a function whose
// name contains fn.
type callerCtx struct {
	context.Context
	fn   string
	k    int
	mu   sync.Mutex
	seen int
	done chan struct{}
	hit  bool
}

func (c *callerCtx) Done() <-chan struct{} { return c.done }

func (c *callerCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hit {
		return context.Canceled
	}
	pc, _, _, _ := runtime.Caller(1)
	if f := runtime.FuncForPC(pc); f != nil && strings.Contains(f.Name(), c.fn) {
		if c.seen++; c.seen >= c.k {
			c.hit = true
			close(c.done)
			return context.Canceled
		}
	}
	return nil
}

// TestOCIIndexSourceStops: a stop after the pack image is read still stops
// the load: whichever read of the image's files (the index, a bundle map,
// a module) it falls on fails cancelled and New says so; with no stop the
// same source boots.
func TestOCIIndexSourceStops(t *testing.T) {
	index, _ := writeIndex(t, []map[string]any{indexTool("acme.echo", "echo.wasm")}, nil, map[string][]byte{"echo.wasm": examples.EchoWasm})
	ix, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(filepath.Join(t.TempDir(), "cache")))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ref := artifact.LayoutPrefix + filepath.Join(t.TempDir(), "layout") + ":1"
	if _, err := o.PushPack(context.Background(), ref, "1", []artifact.PackFile{{Title: "index.json", Data: ix}, {Title: "echo.wasm", Data: examples.EchoWasm}}); err != nil {
		t.Fatal(err)
	}
	exec := newExecutor(t, executor.NewConfig())
	src := server.OCIIndexSource{Ref: ref, OCI: o}
	// Every file read the load makes, in turn, is where the stop falls.
	k := 1
	for ; ; k++ {
		ctx := &callerCtx{Context: context.Background(), fn: "(*PackImage).stopped", k: k, done: make(chan struct{})}
		srv, err := server.New(ctx, exec, src, server.Options{Token: "tok"})
		if !ctx.hit {
			if err != nil {
				t.Fatal(err)
			}
			srv.Close(context.Background())
			break
		}
		var be *server.BootError
		if !errors.As(err, &be) || len(be.Problems) == 0 || !strings.Contains(be.Problems[0].Message, "cancelled") {
			t.Fatalf("stop at read check %d: got %v, want a boot error of a cancelled read", k, err)
		}
		t.Logf("stop at read check %d: %s", k, be.Problems[0].Message)
	}
	if k < 3 {
		t.Fatalf("the load checked the context %d times, want one per file read at least (index, bundle map, module)", k-1)
	}
	srv, err := server.New(context.Background(), exec, src, server.Options{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close(context.Background())
}
