package executor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

func posture(p string) func(m map[string]any) {
	return func(m map[string]any) { m["sandbox"] = p }
}

// context-isolated and strict never let state reach the next call; none
// reuses a warm instance.
func TestPostureIsolation(t *testing.T) {
	e := newExecutor(t)
	for _, fx := range []string{"counter", "counter_reactor"} {
		for _, tc := range []struct {
			posture string
			want    []string
		}{
			{"context-isolated", []string{`{"count":1}`, `{"count":1}`, `{"count":1}`}},
			{"strict", []string{`{"count":1}`, `{"count":1}`, `{"count":1}`}},
			{"none", []string{`{"count":1}`, `{"count":2}`, `{"count":3}`}},
		} {
			t.Run(fx+"/"+tc.posture, func(t *testing.T) {
				tool := load(t, e, fx, posture(tc.posture))
				if tool.Posture() != manifest.Posture(tc.posture) {
					t.Fatalf("posture %s", tool.Posture())
				}
				for i, want := range tc.want {
					res, err := invoke(t, tool, `{}`)
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					jsonEqual(t, res.Output, want)
				}
			})
		}
	}
}

// Absent sandbox means context-isolated.
func TestDefaultPostureIsContextIsolated(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "counter", nil)
	if tool.Posture() != manifest.PostureContextIsolated {
		t.Fatalf("posture = %s", tool.Posture())
	}
}

// Many goroutines on the same tools at once: every call answers correctly,
// isolated counters always answer 1, while spinning calls fail alone.
func TestConcurrentInvocations(t *testing.T) {
	e := newExecutor(t)
	echo := load(t, e, "echo_reactor", nil)
	counter := load(t, e, "counter", nil)
	spin := load(t, e, "loop", withLimits(16, 50))
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	rounds := 10
	if testing.Short() {
		rounds = 5 // every fifth round spins to cpuMs 50
	}
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				in := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				res, err := echo.Invoke(context.Background(), executor.Request{Input: []byte(in)})
				if err != nil || string(res.Output) != in {
					errs <- fmt.Errorf("echo %s: %v %s", in, err, res.Output)
					return
				}
				res, err = counter.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)})
				if err != nil || string(res.Output) != `{"count":1}` {
					errs <- fmt.Errorf("counter: %v %s", err, res.Output)
					return
				}
				if i%5 == 0 {
					if _, err := spin.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)}); !isCode(err, toolerr.LimitsExceeded) {
						errs <- fmt.Errorf("spin: %v", err)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func isCode(err error, c toolerr.Code) bool {
	te := toolerr.As(err)
	return te != nil && te.Code == c
}

func TestLoadRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("filesystem ref outside dev mode", func(t *testing.T) {
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithDevMode(false) })
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", nil))
		wantCode(t, err, toolerr.ArtifactRefused)
	})
	t.Run("missing module", func(t *testing.T) {
		e := newExecutor(t)
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", func(m map[string]any) {
			m["codeArtifactRef"] = map[string]any{"kind": "filesystem", "modulePath": "/nonexistent/x.wasm"}
		}))
		wantCode(t, err, toolerr.ArtifactUnavailable)
	})
	t.Run("oci without resolver", func(t *testing.T) {
		e := newExecutor(t)
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", func(m map[string]any) {
			m["codeArtifactRef"] = map[string]any{"kind": "oci", "imageRef": "localhost:5000/a/b:1", "modulePath": "x.wasm", "artifactVersion": "1"}
		}))
		wantCode(t, err, toolerr.ArtifactUnavailable)
	})
	t.Run("refused posture", func(t *testing.T) {
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithRefusedPostures(manifest.PostureNone) })
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", posture("none")))
		wantCode(t, err, toolerr.LevelNotSupported)
	})
	t.Run("strict with unrestricted network", func(t *testing.T) {
		e := newExecutor(t)
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", func(m map[string]any) {
			m["sandbox"] = "strict"
			m["network"] = map[string]any{"kind": "unrestricted"}
		}))
		wantCode(t, err, toolerr.PolicyRefused)
	})
	t.Run("invalid manifest", func(t *testing.T) {
		e := newExecutor(t)
		_, err := e.Load(ctx, []byte(`{"id":"x"}`))
		te := wantCode(t, err, toolerr.InvalidToolDefinition)
		if len(te.Issues) == 0 {
			t.Fatal("no issues")
		}
	})
	t.Run("not wasm", func(t *testing.T) {
		e := newExecutor(t)
		p := filepath.Join(t.TempDir(), "junk.wasm")
		os.WriteFile(p, []byte("\x00asm\x01\x00\x00\x00\x05garbage"), 0o600)
		_, err := e.Load(ctx, manifestFor(t, "echo_reactor", func(m map[string]any) {
			m["codeArtifactRef"] = map[string]any{"kind": "filesystem", "modulePath": p}
		}))
		wantCode(t, err, toolerr.HandlerShapeInvalid)
	})
}

func TestCacheDirMustBePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := executor.New(context.Background(), executor.NewConfig().WithCacheDir(dir)); err == nil {
		t.Fatal("a world-writable cache directory was accepted")
	}
	fresh := filepath.Join(t.TempDir(), "new", "cache")
	e, err := executor.New(context.Background(), executor.NewConfig().WithCacheDir(fresh))
	if err != nil {
		t.Fatal(err)
	}
	e.Close(context.Background())
	st, err := os.Stat(fresh)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
}
