package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"

	"github.com/sandboxd/sandboxd/executor"
)

// Extism plug-ins side by side: the same unmodified Extism plug-ins run by
// sandboxd's Extism ABI (validated, context-isolated, fresh instance per
// call) and by Extism's go-sdk on a reused instance and on a fresh instance
// per call. count_vowels.wasm is go-sdk's own Rust test plug-in (read from
// the module cache copy bench/go.mod selects); extism-go.wasm is
// examples/extism-go (Extism's Go PDK), built here.

// countVowelsOutput is the output schema of both plug-ins' count_vowels.
const countVowelsOutput = `{"type":"object","properties":{"count":{"type":"integer"},"total":{"type":"integer"},"vowels":{"type":"string"}},"required":["count","total","vowels"],"additionalProperties":false}`

func extismPluginManifest(entry string) []byte {
	return []byte(fmt.Sprintf(`{"id":"bench.extism","description":"bench","version":"1.0.0","sandbox":"context-isolated",
"input":{"type":"string","maxLength":65536},"output":%s,"codeArtifactRef":{"kind":"filesystem","modulePath":"plugin.wasm#%s"},"limits":{"memMB":64,"cpuMs":5000}}`, countVowelsOutput, entry))
}

// goSDKPlugin reads one of go-sdk's wasm/ test plug-ins from the module
// cache.
func goSDKPlugin(tb testing.TB, name string) []byte {
	tb.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/extism/go-sdk").Output()
	if err != nil {
		tb.Fatalf("go list -m github.com/extism/go-sdk: %v", err)
	}
	return readFile(tb, filepath.Join(strings.TrimSpace(string(out)), "wasm", name))
}

// goPDKExample builds examples/extism-go as its Makefile does.
func goPDKExample(tb testing.TB) []byte {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "extism-go.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = filepath.Join(root(tb), "examples", "extism-go")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build examples/extism-go: %v\n%s", err, b)
	}
	return readFile(tb, out)
}

func newExtismWASI(tb testing.TB, wasm []byte) *extism.CompiledPlugin {
	tb.Helper()
	m := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm, Name: "main"}}}
	cp, err := extism.NewCompiledPlugin(context.Background(), m, extism.PluginConfig{EnableWasi: true}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cp.Close(context.Background()) })
	return cp
}

// extismPluginRows measures both plug-ins and writes their table.
func extismPluginRows(t *testing.T, r *report) {
	ctx := context.Background()
	text := strings.Repeat("hello world, ", 79)[:1024] // 1 KiB of text
	in, _ := json.Marshal(text)
	r.p("")
	r.p("## Extism plug-ins: sandboxd vs Extism go-sdk")
	r.p("")
	r.p("Unmodified Extism plug-ins, `count_vowels` on 1 KiB of text. sandboxd runs them through its Extism ABI (`docs/extism.md`) with the input schema `{\"type\":\"string\"}` and an object output schema validated, posture context-isolated:")
	r.p("*recycled* is the default (a pooled instance reset to its post-initialisation state), *never-used* turns recycling off (what strict does). Extism go-sdk runs the same bytes, validating nothing,")
	r.p("on one reused instance and on a fresh `CompiledPlugin.Instance` per call. `count_vowels.wasm` is go-sdk v1.7.1's Rust test plug-in; `extism-go.wasm` is `examples/extism-go` (Go PDK v1.1.3, a standard-Go WASI reactor).")
	r.p("")
	cache := t.TempDir()
	for _, pl := range []struct {
		name string
		wasm []byte
	}{{"count_vowels.wasm (Rust PDK)", goSDKPlugin(t, "count_vowels.wasm")}, {"extism-go.wasm (Go PDK)", goPDKExample(t)}} {
		recycled := newExecutor(t, cache, 2)
		never := newExecutor(t, cache, 2, noRecycle)
		load := func(e *executor.Executor) *executor.Tool {
			tool, err := e.Load(ctx, extismPluginManifest("count_vowels"), executor.WithModule(pl.wasm))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tool.Close(ctx) })
			return tool
		}
		tRec, tNever := load(recycled), load(never)
		cp := newExtismWASI(t, pl.wasm)
		reused := extismInstance(t, cp)
		invoke := func(tool *executor.Tool) func() error {
			return func() error {
				_, err := tool.Invoke(ctx, executor.Request{Input: in})
				return err
			}
		}
		names := []string{
			"sandboxd context-isolated (recycled fresh instance), validated",
			"sandboxd context-isolated (never-used pooled instance), validated",
			"Extism reused instance (no validation)",
			"Extism fresh instance per call (no validation)",
		}
		fns := []func() error{invoke(tRec), invoke(tNever),
			func() error { _, err := extismCall(reused, "count_vowels", []byte(text)); return err },
			func() error {
				p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
				if err != nil {
					return err
				}
				defer p.Close(ctx)
				_, err = extismCall(p, "count_vowels", []byte(text))
				return err
			},
		}
		res, err := interleaved(fns, 5, 6, 2000, 150*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", pl.name, err)
		}
		r.p("### %s (%d bytes)", pl.name, len(pl.wasm))
		r.p("")
		r.p("| case | p50 µs | p99 µs | allocs/op | B/op | calls |")
		r.p("|---|---:|---:|---:|---:|---:|")
		for i, n := range names {
			r.p("| %s | %s | %s | %.0f | %.0f | %d |", n, us(res[i].p50), us(res[i].p99), res[i].allocs, res[i].bytes, res[i].n)
		}
		r.p("")
		r.p("| ratio (p50) | |")
		r.p("|---|---:|")
		r.p("| **sandboxd fresh+validated (recycled) / Extism reused** (goal ≤ 0.5×) | **%s** |", ratio(res[0].p50, res[2].p50))
		r.p("| **sandboxd fresh+validated (recycled) / Extism fresh** (goal ≤ 0.1×) | **%s** |", ratio(res[0].p50, res[3].p50))
		r.p("| sandboxd never-used pooled / Extism reused | %s |", ratio(res[1].p50, res[2].p50))
		r.p("| sandboxd never-used pooled / Extism fresh | %s |", ratio(res[1].p50, res[3].p50))
		r.p("")
	}
}

// TestExtismPluginRows measures the Extism plug-in rows alone and logs
// them (go test -run TestExtismPluginRows -v); make bench writes them into
// BENCHMARKS.md with the rest of the suite.
func TestExtismPluginRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	r := &report{}
	extismPluginRows(t, r)
	t.Log("\n" + r.b.String())
}
