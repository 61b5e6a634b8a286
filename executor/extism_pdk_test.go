package executor_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// Extism plug-ins of the JS PDK (QuickJS) and the Haskell PDK, as
// extism/hello-from publishes them (testdata/wasm/extism/README.md): both
// run unmodified under every posture, on warm, recycled, never-used pooled
// and unpooled instances, with the output Extism gives them. The JS one
// has no _initialize (wizer ran QuickJS's start-up when it was built) and
// 10,000 data segments; the Haskell one runs _initialize then hs_init.

// pdkPlugin reads testdata/wasm/extism/NAME (over 1 MiB: skipped under
// -short).
func pdkPlugin(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", "extism", name))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.SkipShort(t, name, int64(len(b)))
	return b
}

func TestExtismPDKPlugins(t *testing.T) {
	plugins := []struct {
		file, greeting string
		recycles       bool // a used instance is reset
	}{
		{"hello-from-js.wasm", "Hello from JavaScript!", true},
		// GHC's allocator grows memory by a megablock (1 MiB) in every
		// call: a reset puts it back to its saved size (instance.shrink).
		{"hello-from-haskell.wasm", "Hello from Haskell!", true},
	}
	configs := []struct {
		name    string
		posture string
		pool    int
		recycle bool
		// image: every instance after the first is loaded from the tool's
		// image (for recycled ones: unless they are reset instead)
		image bool
	}{
		{"none", "none", 2, true, false},
		{"context-isolated recycled", "context-isolated", 2, true, true},
		{"context-isolated never-used (recycling off)", "context-isolated", 2, false, true},
		{"strict pooled", "strict", 2, true, true},
		{"strict unpooled", "strict", 0, true, true},
	}
	str := func(m map[string]any) { m["output"] = map[string]any{"type": "string"} }
	for _, pl := range plugins {
		t.Run(pl.file, func(t *testing.T) {
			wasm := pdkPlugin(t, pl.file)
			for _, c := range configs {
				t.Run(c.name, func(t *testing.T) {
					e := newExecutor(t, func(cfg executor.Config) executor.Config {
						return cfg.WithPoolSize(c.pool).WithRecycling(c.recycle)
					})
					tool := mustLoadExtism(t, e, wasm, "hello", c.posture, str)
					if tool.Style() != executor.Reactor {
						t.Fatalf("style %s", tool.Style())
					}
					const calls = 12
					for i := 0; i < calls; i++ {
						input := []string{"Greetings", "", "Grüße, 世界"}[i%3]
						res, err := callExtism(t, tool, input, executor.CallContext{})
						if err != nil {
							t.Fatalf("call %d: %v", i+1, err)
						}
						want, _ := json.Marshal(input + "\n" + pl.greeting)
						if string(res.Output) != string(want) {
							t.Fatalf("call %d: output %s, want %s", i+1, res.Output, want)
						}
						if res.Usage.Fuel <= 0 {
							t.Fatalf("call %d: no fuel charged (%+v)", i+1, res.Usage)
						}
						time.Sleep(time.Millisecond) // let the refill goroutine recycle or refill
					}
					st := tool.Stats()
					t.Logf("%+v", st)
					recycled := c.posture == "context-isolated" && c.recycle && pl.recycles
					if c.image && !recycled && st.ImageInstances < calls/2 {
						t.Fatalf("only %d instances were loaded from the tool's image", st.ImageInstances)
					}
					if !c.image && st.ImageInstances != 0 {
						t.Fatalf("posture none loaded %d instances from an image", st.ImageInstances)
					}
					switch {
					case recycled:
						if st.RecycledCalls == 0 {
							t.Fatal("no call was served by a recycled instance")
						}
					case st.RecycledCalls != 0:
						t.Fatalf("%d calls were served by a recycled instance", st.RecycledCalls)
					}
				})
			}
		})
	}
}
