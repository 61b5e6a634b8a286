package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"

	"github.com/sandboxd/sandboxd/executor"
)

// Extism plug-ins of every PDK side by side: the same unmodified Extism
// plug-ins run by sandboxd's Extism ABI (validated; context-isolated on a
// recycled instance, and strict on a never-used one) and by Extism's go-sdk
// on a reused instance and on a fresh instance per call.
//
//   - count_vowels.wasm is go-sdk's own Rust test plug-in (read from the
//     module cache copy bench/go.mod selects);
//   - extism-go.wasm is examples/extism-go (Extism's Go PDK), built here;
//   - hello-from-js.wasm (JS PDK: QuickJS, pre-initialised) and
//     hello-from-haskell.wasm (Haskell PDK) are extism/hello-from's
//     prebuilt plug-ins, committed under testdata/wasm/extism/ (its README
//     gives their provenance).

// countVowelsOutput is the output schema of both count_vowels plug-ins.
const countVowelsOutput = `{"type":"object","properties":{"count":{"type":"integer"},"total":{"type":"integer"},"vowels":{"type":"string"}},"required":["count","total","vowels"],"additionalProperties":false}`

// stringSchema is the output schema of the hello plug-ins: their text
// becomes a JSON string (docs/extism.md, "Input and output").
const stringSchema = `{"type":"string","maxLength":65536}`

func extismPluginManifest(entry, posture, output string) []byte {
	return []byte(fmt.Sprintf(`{"id":"bench.extism","description":"bench","version":"1.0.0","sandbox":%q,
"input":{"type":"string","maxLength":65536},"output":%s,"codeArtifactRef":{"kind":"filesystem","modulePath":"plugin.wasm#%s"},"limits":{"memMB":64,"cpuMs":5000}}`, posture, output, entry))
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

// pdkPlugin is one Extism plug-in of the table: its entry, the bytes it is
// given and the output both runtimes must produce.
type pdkPlugin struct {
	name   string // the table's heading
	pdk    string // the goal row's name
	wasm   []byte
	entry  string
	input  string // the bytes Extism gets; sandboxd gets them as a JSON string
	output string // sandboxd's output schema
	want   string // the plug-in's output bytes
}

func pdkPlugins(tb testing.TB) []pdkPlugin {
	text := strings.Repeat("hello world, ", 79)[:1024] // 1 KiB of text: 237 vowels
	vowels := `{"count":237,"total":237,"vowels":"aeiouAEIOU"}`
	ext := func(name string) []byte {
		return readFile(tb, filepath.Join(root(tb), "testdata", "wasm", "extism", name))
	}
	return []pdkPlugin{
		{"count_vowels.wasm (Rust PDK)", "Rust PDK (go-sdk's count_vowels.wasm)", goSDKPlugin(tb, "count_vowels.wasm"), "count_vowels", text, countVowelsOutput, vowels},
		{"extism-go.wasm (Go PDK)", "Go PDK (examples/extism-go)", goPDKExample(tb), "count_vowels", text, countVowelsOutput, vowels},
		{"hello-from-js.wasm (JS PDK, QuickJS)", "JS PDK (hello-from-js.wasm)", ext("hello-from-js.wasm"), "hello", "Greetings", stringSchema, "Greetings\nHello from JavaScript!"},
		{"hello-from-haskell.wasm (Haskell PDK)", "Haskell PDK (hello-from-haskell.wasm)", ext("hello-from-haskell.wasm"), "hello", "Greetings", stringSchema, "Greetings\nHello from Haskell!"},
	}
}

// wantOutput checks that sandboxd's output is the plug-in's bytes as the
// output schema turns them into JSON.
func (pl pdkPlugin) wantOutput(tb testing.TB, got json.RawMessage) {
	tb.Helper()
	want := []byte(pl.want)
	if pl.output == stringSchema {
		want, _ = json.Marshal(pl.want)
	}
	if string(got) != string(want) {
		tb.Fatalf("%s: sandboxd's output %s, want %s", pl.name, got, want)
	}
}

// extismPluginRows measures every plug-in and writes their tables.
func extismPluginRows(t *testing.T, r *report) {
	ctx := context.Background()
	load0, _ := os.ReadFile("/proc/loadavg")
	r.p("")
	r.p("## Extism plug-ins of every PDK: sandboxd vs Extism go-sdk")
	r.p("")
	r.p("Unmodified Extism plug-ins: `count_vowels` on 1 KiB of text (Rust, Go PDKs) and `hello` on the bytes `Greetings` (JS, Haskell PDKs). sandboxd runs them through its Extism ABI (`docs/extism.md`) with the input schema `{\"type\":\"string\"}` and the output validated (an object schema for `count_vowels`, `{\"type\":\"string\"}` for `hello`):")
	r.p("*recycled* is posture context-isolated with its default (a pooled instance reset to its post-initialisation state), *strict* takes a never-used pooled instance (loaded from the tool's copy-on-write image when it has one) for every call. Extism go-sdk runs the same bytes, validating nothing,")
	r.p("on one reused instance and on a fresh `CompiledPlugin.Instance` per call. Every output is checked once before timing. `count_vowels.wasm` is go-sdk %s's Rust test plug-in; `extism-go.wasm` is `examples/extism-go` (Go PDK v1.1.3, a standard-Go WASI reactor);", moduleVersion("github.com/extism/go-sdk"))
	r.p("`hello-from-js.wasm` (JS PDK: QuickJS, pre-initialised, no `_initialize`) and `hello-from-haskell.wasm` (GHC, `_initialize` + `hs_init`) are extism/hello-from's prebuilt plug-ins (`testdata/wasm/extism/README.md`).")
	r.p("The five cases of a plug-in are measured round-robin, 6 rounds of 150 ms each, calls back to back. Load average at the start: %s.", strings.TrimSpace(string(load0)))
	r.p("Reproduce: `cd bench && go test -run TestExtismPluginRows -v .` (the same tables; `make bench` also records the goal rows).")
	r.p("")
	cache := t.TempDir()
	for _, pl := range pdkPlugins(t) {
		in, _ := json.Marshal(pl.input)
		load := func(e *executor.Executor, posture string) *executor.Tool {
			tool, err := e.Load(ctx, extismPluginManifest(pl.entry, posture, pl.output), executor.WithModule(pl.wasm))
			if err != nil {
				t.Fatalf("%s: %v", pl.name, err)
			}
			t.Cleanup(func() { _ = tool.Close(ctx) })
			return tool
		}
		tRec, tStrict := load(newExecutor(t, cache, 2), "context-isolated"), load(newExecutor(t, cache, 2), "strict")
		tNone := load(newExecutor(t, cache, 0), "none")
		cp := newExtismWASI(t, pl.wasm)
		reused := extismInstance(t, cp)
		fresh := func() ([]byte, error) {
			p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
			if err != nil {
				return nil, err
			}
			defer p.Close(ctx)
			return extismCall(p, pl.entry, []byte(pl.input))
		}
		for _, tool := range []*executor.Tool{tRec, tStrict, tNone} {
			res, err := tool.Invoke(ctx, executor.Request{Input: in})
			if err != nil {
				t.Fatalf("%s: %v", pl.name, err)
			}
			pl.wantOutput(t, res.Output)
		}
		for _, f := range []func() ([]byte, error){func() ([]byte, error) { return extismCall(reused, pl.entry, []byte(pl.input)) }, fresh} {
			out, err := f()
			if err != nil || string(out) != pl.want {
				t.Fatalf("%s: Extism's output %q (%v), want %q", pl.name, out, err, pl.want)
			}
		}
		invoke := func(tool *executor.Tool) func() error {
			return func() error {
				_, err := tool.Invoke(ctx, executor.Request{Input: in})
				return err
			}
		}
		names := []string{
			"sandboxd context-isolated (recycled fresh instance), validated",
			"sandboxd strict (never-used pooled instance), validated",
			"Extism reused instance (no validation)",
			"Extism fresh instance per call (no validation)",
			"sandboxd none (reused instance, no isolation), validated",
		}
		fns := []func() error{invoke(tRec), invoke(tStrict),
			func() error { _, err := extismCall(reused, pl.entry, []byte(pl.input)); return err },
			func() error { _, err := fresh(); return err },
			invoke(tNone),
		}
		res, err := interleaved(fns, 5, 6, 2000, 150*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", pl.name, err)
		}
		loadNow, _ := os.ReadFile("/proc/loadavg")
		r.p("### %s (%d bytes)", pl.name, len(pl.wasm))
		r.p("")
		r.p("| case | p50 µs | p99 µs | allocs/op | B/op | calls |")
		r.p("|---|---:|---:|---:|---:|---:|")
		for i, n := range names {
			r.p("| %s | %s | %s | %.0f | %.0f | %d |", n, us(res[i].p50), us(res[i].p99), res[i].allocs, res[i].bytes, res[i].n)
		}
		r.p("")
		// Paced, as the method for fresh instances has it: one call
		// every 20 ms (the pool refills in between), strict, recycled and
		// posture none's reused instance in turn; fresh-instance cost =
		// p50(call) − p50(reused call).
		pacedRes := pacedCalls(t, []func() error{invoke(tStrict), invoke(tRec), invoke(tNone)}, 20*time.Millisecond)
		r.p("Paced (one call every 20 ms, in turn, %d each): strict p50 %s µs, recycled %s µs, posture none (reused instance) %s µs: **fresh-instance cost %s µs strict, %s µs recycled** (call − reused call).",
			pacedRes[0].n, us(pacedRes[0].p50), us(pacedRes[1].p50), us(pacedRes[2].p50), us(pacedRes[0].p50-pacedRes[2].p50), us(pacedRes[1].p50-pacedRes[2].p50))
		r.p("")
		rs, st := tRec.Stats(), tStrict.Stats()
		r.p("Recycled tool: %d calls served by a recycled instance, %d instances loaded from the image; strict tool: %d instances loaded from the image. Load average after: %s.", rs.RecycledCalls, rs.ImageInstances, st.ImageInstances, strings.TrimSpace(string(loadNow)))
		r.p("")
		recX, strictX := ratioOf(res[0].p50, res[2].p50), ratioOf(res[1].p50, res[3].p50)
		vRec := addGoal("Extism plug-in, "+pl.pdk+": sandboxd recycled (context-isolated, validated) / Extism reused, p50", fmtRatio(recX), "≤ 0.5×", recX <= 0.5)
		vStrict := addGoal("Extism plug-in, "+pl.pdk+": sandboxd strict (never-used, validated) / Extism fresh instance, p50", fmtRatio(strictX), "≤ 0.1×", strictX <= 0.1)
		r.p("| ratio (p50) | | goal |")
		r.p("|---|---:|---|")
		r.p("| **sandboxd recycled / Extism reused** | **%s** | ≤ 0.5×: **%s** |", fmtRatio(recX), vRec)
		r.p("| **sandboxd strict / Extism fresh** | **%s** | ≤ 0.1×: **%s** |", fmtRatio(strictX), vStrict)
		r.p("| sandboxd recycled / Extism fresh | %s | |", ratio(res[0].p50, res[3].p50))
		r.p("| sandboxd strict / Extism reused | %s | |", ratio(res[1].p50, res[2].p50))
		r.p("| sandboxd none (reused) / Extism reused: the metered guest, validation and kernel without any isolation | %s | |", ratio(res[4].p50, res[2].p50))
		r.p("")
	}
}

// pacedCalls calls each of fns in turn after a busy wait of pace (so that a
// pool's background refill keeps up), 40 times each (8 with -quick) after 3
// unrecorded rounds, and returns their latencies.
func pacedCalls(t *testing.T, fns []func() error, pace time.Duration) []result {
	n := 40
	if *quick {
		n = 8
	}
	hs := make([]*hist, len(fns))
	for j := range hs {
		hs[j] = newHist()
	}
	for i := 0; i < n+3; i++ {
		for j, fn := range fns {
			busyWait(pace)
			t0 := time.Now()
			if err := fn(); err != nil {
				t.Fatal(err)
			}
			if i >= 3 {
				hs[j].add(time.Since(t0))
			}
		}
	}
	res := make([]result, len(hs))
	for j, h := range hs {
		res[j] = result{p50: h.quantile(0.5), p99: h.quantile(0.99), n: h.n}
	}
	return res
}

// TestExtismPluginRows measures the Extism plug-in rows alone and logs
// them with their goal rows (go test -run TestExtismPluginRows -v); make
// bench writes them into BENCHMARKS.md with the rest of the suite.
func TestExtismPluginRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	goals = nil
	r := &report{}
	extismPluginRows(t, r)
	writeGoals(r)
	t.Log("\n" + r.b.String())
}

// BenchmarkExtismPlugins is the table's sandboxd cases as benchmarks, for
// profiles of one plug-in and posture: recycled (context-isolated, pool of
// 2, as the table has it) and none (a reused instance), calls back to back.
//
//	go test -run '^$' -bench 'ExtismPlugins/Go/recycled' -benchtime 3000x -cpuprofile cpu.out -memprofile mem.out .
func BenchmarkExtismPlugins(b *testing.B) {
	ctx := context.Background()
	cache := b.TempDir()
	for _, pl := range pdkPlugins(b) {
		in, _ := json.Marshal(pl.input)
		for _, c := range []struct {
			name, posture string
			pool          int
		}{{"recycled", "context-isolated", 2}, {"none", "none", 0}} {
			b.Run(strings.Fields(pl.pdk)[0]+"/"+c.name, func(b *testing.B) {
				tool, err := newExecutor(b, cache, c.pool).Load(ctx, extismPluginManifest(pl.entry, c.posture, pl.output), executor.WithModule(pl.wasm))
				if err != nil {
					b.Fatal(err)
				}
				defer tool.Close(ctx)
				res, err := tool.Invoke(ctx, executor.Request{Input: in})
				if err != nil {
					b.Fatal(err)
				}
				pl.wantOutput(b, res.Output)
				b.ReportAllocs()
				var ru0, ru1 syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := tool.Invoke(ctx, executor.Request{Input: in}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
				b.ReportMetric(float64(tool.Stats().RecycledCalls)/float64(b.N+1), "recycled/op")
				b.ReportMetric(float64(ru1.Minflt-ru0.Minflt)/float64(b.N), "faults/op")
				b.ReportMetric(float64(time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()).Microseconds())/float64(b.N), "cpu-us/op")
				b.ReportMetric(float64(time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano()).Microseconds())/float64(b.N), "sys-us/op")
			})
		}
	}
}
