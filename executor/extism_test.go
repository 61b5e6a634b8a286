package executor_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Extism's own published test plug-ins, read at test time from the Go
// module cache copy of github.com/extism/go-sdk@v1.7.1 (its wasm/ folder:
// Rust, TinyGo, C, Haskell and standard-Go builds), run with the results its
// extism_test.go expects. The module is a test dependency of bench/ (and
// .ci/deps.d/20-extism.sh downloads it); under CI=true a missing copy fails.
const extismSDK = "github.com/extism/go-sdk@v1.7.1"

var extismDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(extismSDK), "wasm")
	if _, err := os.Stat(dir); err != nil {
		return "", err
	}
	return dir, nil
})

// extismPlugin returns the bytes of one of go-sdk's test plug-ins.
func extismPlugin(t testing.TB, name string) []byte {
	t.Helper()
	dir, err := extismDir()
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(dir, name)); err == nil {
			sandboxtest.SkipShort(t, name, int64(len(b)))
			return b
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s's wasm/%s is not in the module cache (go mod download %s): %v", extismSDK, name, extismSDK, err)
	}
	t.Skipf("%s's wasm/%s is not in the module cache (go mod download %s): %v", extismSDK, name, extismSDK, err)
	return nil
}

// extismManifest is a manifest for an Extism plug-in; entry is the
// modulePath #NAME suffix ("" for none).
func extismManifest(t testing.TB, entry, posture string, edit func(m map[string]any)) []byte {
	t.Helper()
	mp := "plugin.wasm"
	if entry != "" {
		mp += "#" + entry
	}
	m := map[string]any{
		"id": "test.extism", "description": "an Extism plug-in", "version": "1.0.0",
		"input": map[string]any{"type": "string"}, "output": map[string]any{},
		"sandbox":         posture,
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": mp},
		"limits":          map[string]any{"memMB": 64, "cpuMs": 5000},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadExtism(t testing.TB, e *executor.Executor, wasm []byte, entry, posture string, edit func(m map[string]any)) (*executor.Tool, error) {
	t.Helper()
	tool, err := e.Load(context.Background(), extismManifest(t, entry, posture, edit), executor.WithModule(wasm))
	if err == nil {
		t.Cleanup(func() { _ = tool.Close(context.Background()) })
	}
	return tool, err
}

func mustLoadExtism(t testing.TB, e *executor.Executor, wasm []byte, entry, posture string, edit func(m map[string]any)) *executor.Tool {
	t.Helper()
	tool, err := loadExtism(t, e, wasm, entry, posture, edit)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return tool
}

func callExtism(t testing.TB, tool *executor.Tool, input any, cc executor.CallContext) (*executor.Result, error) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	return tool.Invoke(context.Background(), executor.Request{Input: in, Context: cc.WithDefaults("t1", "r1")})
}

var postures = []string{"none", "context-isolated", "strict"}

func TestExtismCountVowels(t *testing.T) {
	wasm := extismPlugin(t, "count_vowels.wasm")
	e := newExecutor(t)
	for _, posture := range postures {
		t.Run(posture, func(t *testing.T) {
			tool := mustLoadExtism(t, e, wasm, "", posture, nil)
			if tool.Style() != executor.Reactor {
				t.Fatalf("style %s", tool.Style())
			}
			// extism_test.go TestCallFunction
			for input, want := range map[string]int{"hello world": 3, "aaaaaa": 6, "": 0, "bbbbbbb": 0} {
				res, err := callExtism(t, tool, input, executor.CallContext{})
				if err != nil {
					t.Fatalf("%q: %v", input, err)
				}
				var out struct{ Count int }
				if err := json.Unmarshal(res.Output, &out); err != nil || out.Count != want {
					t.Fatalf("%q: output %s, want count %d", input, res.Output, want)
				}
			}
		})
	}
}

// extism_test.go TestMultipleCallsOutput: the Rust plug-in keeps a running
// total in a var. Under posture none the warm instance keeps it; under
// context-isolated and strict every call starts with no vars, as a fresh
// Extism instance does.
func TestExtismVarsPerPosture(t *testing.T) {
	wasm := extismPlugin(t, "count_vowels.wasm")
	e := newExecutor(t)
	want := map[string][2]string{
		"none":             {`{"count":3,"total":3,"vowels":"aeiouAEIOU"}`, `{"count":1,"total":4,"vowels":"aeiouAEIOU"}`},
		"context-isolated": {`{"count":3,"total":3,"vowels":"aeiouAEIOU"}`, `{"count":1,"total":1,"vowels":"aeiouAEIOU"}`},
		"strict":           {`{"count":3,"total":3,"vowels":"aeiouAEIOU"}`, `{"count":1,"total":1,"vowels":"aeiouAEIOU"}`},
	}
	for _, posture := range postures {
		t.Run(posture, func(t *testing.T) {
			tool := mustLoadExtism(t, e, wasm, "count_vowels", posture, nil)
			for i, input := range []string{"aaa", "bbba"} {
				res, err := callExtism(t, tool, input, executor.CallContext{})
				if err != nil {
					t.Fatal(err)
				}
				if string(res.Output) != want[posture][i] {
					t.Fatalf("call %d: %s, want %s", i+1, res.Output, want[posture][i])
				}
			}
		})
	}
}

// extismCase is one go-sdk test plug-in run with the result extism_test.go
// expects.
type extismCase struct {
	name   string
	file   string
	entry  string
	edit   func(m map[string]any)
	cc     executor.CallContext
	input  any
	style  executor.Style
	output string       // the exact output JSON on success
	code   toolerr.Code // the error code on failure
	msg    string       // a substring of the error message
	detail func(t *testing.T, d map[string]any)
	// deadline is the call's wall deadline (default 30 s).
	deadline time.Duration
}

func withConfig(names ...string) func(m map[string]any) {
	return func(m map[string]any) {
		cfg := map[string]any{}
		for _, n := range names {
			cfg[n] = map[string]any{"type": "string"}
		}
		m["needsSpec"] = map[string]any{"config": cfg}
	}
}

func rawConfig(kv ...string) executor.CallContext {
	cc := executor.CallContext{Config: map[string]json.RawMessage{}}
	for i := 0; i+1 < len(kv); i += 2 {
		b, _ := json.Marshal(kv[i+1])
		cc.Config[kv[i]] = b
	}
	return cc
}

func TestExtismPlugins(t *testing.T) {
	cases := []extismCase{
		{name: "hello (C)", file: "hello.wasm", input: "", style: executor.Reactor, output: `"Hello, world!"`,
			edit: func(m map[string]any) { m["output"] = map[string]any{"type": "string"} }},
		{name: "alloc (C)", file: "alloc.wasm", input: "", style: executor.Reactor, output: `null`},
		{name: "config set (TinyGo)", file: "config.wasm", entry: "run_test", input: "", edit: withConfig("thing"), cc: rawConfig("thing", "hello"),
			style: executor.Reactor, output: `{"config": "hello"}`},
		{name: "config unset (TinyGo)", file: "config.wasm", entry: "run_test", input: "", edit: withConfig("thing"),
			style: executor.Reactor, output: `{"config": "<unset by host>"}`},
		{name: "fail (C)", file: "fail.wasm", input: "", code: toolerr.HandlerError, msg: "Some error message",
			detail: func(t *testing.T, d map[string]any) {
				if d["returned"] != int32(1) {
					t.Errorf("details.returned = %v, want 1", d["returned"])
				}
			}},
		{name: "input_offset (hand-written)", file: "input_offset.wasm", input: "hello world", output: `"\u000b\u0000\u0000\u0000\u0000\u0000\u0000\u0000"`, // the input length as a little-endian u64
			edit: func(m map[string]any) { m["output"] = map[string]any{"type": "string"} }},
		{name: "std_command (Go std, _start)", file: "std_command.wasm", input: "ben", style: executor.Command, output: `"hello ben"`,
			edit: func(m map[string]any) { m["output"] = map[string]any{"type": "string"} }},
		// Not in extism_test.go: this output was measured here (it also
		// reads a config value and sets and reads a var).
		{name: "count_vowels_std (Go std, _start)", file: "count_vowels_std.wasm", input: "hello world", style: executor.Command,
			output: `{"count": 3, "config": "<unset by host>", "a": "this is var a"}`},
		{name: "hello_haskell (GHC)", file: "hello_haskell.wasm", entry: "testing", input: "John", edit: func(m map[string]any) {
			withConfig("greeting")(m)
			m["output"] = map[string]any{"type": "string"}
		}, cc: rawConfig("greeting", "Howdy"), style: executor.Reactor, output: `"Howdy, John"`},
		{name: "exit 500 (TinyGo)", file: "exit.wasm", input: "", edit: withConfig("code"), cc: rawConfig("code", "500"), style: executor.Command,
			code: toolerr.HandlerError, detail: exitCode(500)},
		{name: "exit abc (TinyGo)", file: "exit.wasm", input: "", edit: withConfig("code"), cc: rawConfig("code", "abc"), code: toolerr.HandlerError, detail: exitCode(1)},
		{name: "exit unset (TinyGo)", file: "exit.wasm", input: "", edit: withConfig("code"), code: toolerr.HandlerError, detail: exitCode(2)},
		{name: "exit -1 (TinyGo)", file: "exit.wasm", input: "", edit: withConfig("code"), cc: rawConfig("code", "-1"), code: toolerr.HandlerError, detail: exitCode(0xffffffff)},
		{name: "http denied (TinyGo)", file: "http.wasm", entry: "run_test", input: "", code: toolerr.HandlerError, msg: "network",
			detail: func(t *testing.T, d map[string]any) {
				if d["egress"] != "denied" || d["host"] != "jsonplaceholder.typicode.com" {
					t.Errorf("details %v, want egress denied, host jsonplaceholder.typicode.com", d)
				}
			}},
		{name: "sleep past the deadline (TinyGo)", file: "sleep.wasm", entry: "run_test", input: "", edit: func(m map[string]any) {
			withConfig("duration")(m)
			m["limits"] = map[string]any{"memMB": 64, "cpuMs": 5000}
		}, cc: rawConfig("duration", "3"), code: toolerr.DeadlineExceeded, deadline: 300 * time.Millisecond},
	}
	if testing.Short() {
		cases[len(cases)-1].deadline = 100 * time.Millisecond // the sleep's 6 calls wait out their deadline
	}
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithDefaultTimeout(30 * time.Second) })
	for _, c := range cases {
		for _, posture := range postures {
			t.Run(c.name+"/"+posture, func(t *testing.T) {
				wasm := extismPlugin(t, c.file)
				tool := mustLoadExtism(t, e, wasm, c.entry, posture, c.edit)
				if c.style != "" && tool.Style() != c.style {
					t.Fatalf("style %s, want %s", tool.Style(), c.style)
				}
				for call := 1; call <= 2; call++ { // a second call on a warm, pooled or recycled instance
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					if c.deadline > 0 {
						ctx, cancel = context.WithTimeout(context.Background(), c.deadline)
					}
					in, _ := json.Marshal(c.input)
					res, err := tool.Invoke(ctx, executor.Request{Input: in, Context: c.cc.WithDefaults("t1", "r1")})
					cancel()
					if c.code != "" {
						te := wantCode(t, err, c.code)
						if !strings.Contains(te.Message, c.msg) {
							t.Fatalf("message %q, want it to contain %q", te.Message, c.msg)
						}
						if c.detail != nil {
							c.detail(t, te.Details)
						}
						continue
					}
					if err != nil {
						t.Fatalf("call %d: %v", call, err)
					}
					if string(res.Output) != c.output {
						t.Fatalf("call %d: output %s, want %s", call, res.Output, c.output)
					}
					if res.Usage.Fuel <= 0 {
						t.Fatalf("call %d: no fuel charged (%+v)", call, res.Usage)
					}
				}
			})
		}
	}
}

func exitCode(want uint32) func(t *testing.T, d map[string]any) {
	return func(t *testing.T, d map[string]any) {
		if d["exitCode"] != want {
			t.Errorf("details.exitCode = %v (%T), want %d", d["exitCode"], d["exitCode"], want)
		}
	}
}

// extism_test.go TestLog_custom: every level reaches the host (get_log_level
// is trace); trace and debug are sandboxd's debug.
func TestExtismLog(t *testing.T) {
	wasm := extismPlugin(t, "log.wasm")
	var mu sync.Mutex
	var got []executor.LogRecord
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithLogSink(func(r executor.LogRecord) {
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
		})
	})
	tool := mustLoadExtism(t, e, wasm, "run_test", "strict", nil)
	if _, err := callExtism(t, tool, "", executor.CallContext{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"this is a trace log": 0, "this is a debug log": 0, "this is an info log": 1, "this is a warning log": 2, "this is an error log": 3}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range got {
		if lv, ok := want[r.Msg]; ok && lv == r.Level {
			delete(want, r.Msg)
		}
	}
	if len(want) > 0 {
		t.Fatalf("missing log records %v; got %+v", want, got)
	}
}

// watModule compiles testdata/wasm/extism/NAME.wat.
func watModule(t testing.TB, name string) []byte {
	return sandboxtest.WATFile(t, "testdata/wasm/extism/"+name+".wat")
}

// Refused at load with handler-shape-invalid naming the import: Extism host
// functions (extism:host/user and other namespaces), linked multi-module
// plug-ins, unknown extism:host/env names; an ambiguous entry lists the
// candidates.
func TestExtismRefusals(t *testing.T) {
	e := newExecutor(t)
	cases := []struct {
		name  string
		wasm  func() []byte
		entry string
		msg   []string
	}{
		{"host function (extism:host/user)", func() []byte { return extismPlugin(t, "host.wasm") }, "run_test", []string{"extism:host/user.mult"}},
		{"host function in another namespace", func() []byte { return extismPlugin(t, "host_memory.wasm") }, "run_test", []string{"host.to_upper", "other host-function namespaces"}},
		{"linked multi-module plug-in", func() []byte { return extismPlugin(t, "main.wasm") }, "run_test", []string{"lib.capitalize", "linked multi-module"}},
		{"unknown extism:host/env name", func() []byte { return watModule(t, "unknown_import") }, "", []string{"extism:host/env.bogus", "no such function"}},
		{"several candidates", func() []byte { return watModule(t, "hostile") }, "", []string{"huge_alloc", "load_wild", "offsets", "#NAME"}},
		{"no such export", func() []byte { return watModule(t, "hostile") }, "nope", []string{`"nope"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadExtism(t, e, c.wasm(), c.entry, "strict", nil)
			te := wantCode(t, err, toolerr.HandlerShapeInvalid)
			for _, m := range c.msg {
				if !strings.Contains(te.Message, m) {
					t.Fatalf("message %q does not name %q", te.Message, m)
				}
			}
		})
	}
	// A #NAME suffix on an ABI v1 handler is refused too.
	_, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", func(m map[string]any) {
		m["codeArtifactRef"].(map[string]any)["modulePath"] = fixture(t, "echo_reactor") + "#other"
	}))
	wantCode(t, err, toolerr.HandlerShapeInvalid)
}

// Hostile Extism guests: wild handles, an output past kernel memory and a
// read past the input trap the call (handler-trap), never the host; huge
// allocations return 0 and charge nothing; a var flood fails the call when
// the store reaches its 1 MiB bound.
func TestExtismHostile(t *testing.T) {
	wasm := watModule(t, "hostile")
	e := newExecutor(t)
	str := func(m map[string]any) {
		m["output"] = map[string]any{"type": "string"}
		m["limits"] = map[string]any{"memMB": 16, "cpuMs": 5000}
	}
	for _, posture := range postures {
		t.Run(posture, func(t *testing.T) {
			for _, entry := range []string{"load_wild", "store_wild", "input_wild", "output_past"} {
				tool := mustLoadExtism(t, e, wasm, entry, posture, str)
				_, err := callExtism(t, tool, "abc", executor.CallContext{})
				te := wantCode(t, err, toolerr.HandlerTrap)
				if !strings.Contains(te.Message, "outside kernel memory") && !strings.Contains(te.Message, "past the input") {
					t.Fatalf("%s: %s", entry, te.Message)
				}
				// The tool still serves calls afterwards.
				if _, err := callExtism(t, tool, "abc", executor.CallContext{}); err == nil {
					t.Fatalf("%s: second call succeeded", entry)
				}
			}
			tool := mustLoadExtism(t, e, wasm, "huge_alloc", posture, str)
			res, err := callExtism(t, tool, "", executor.CallContext{})
			if err != nil {
				t.Fatalf("huge_alloc: %v", err)
			}
			if want := `"*\u0000\u0000\u0000\u0000\u0000\u0000\u0000"`; string(res.Output) != want {
				t.Fatalf("huge_alloc: output %s, want %s", res.Output, want)
			}
			if res.Usage.PeakMemMB > 16 {
				t.Fatalf("huge_alloc: peak %v MB over memMB 16", res.Usage.PeakMemMB)
			}
			tool = mustLoadExtism(t, e, wasm, "var_flood", posture, str)
			_, err = callExtism(t, tool, "", executor.CallContext{})
			te := wantCode(t, err, toolerr.HandlerError)
			if te.Details["vars"] != "full" || !strings.Contains(te.Message, "variable store is full") {
				t.Fatalf("var_flood: %s %v", te.Message, te.Details)
			}
		})
	}
}

// The kernel hands out Extism's handles: the input is the first block (77),
// a block's data follows its 12-byte header.
func TestExtismKernelLayout(t *testing.T) {
	wasm := watModule(t, "hostile")
	e := newExecutor(t)
	tool := mustLoadExtism(t, e, wasm, "offsets", "strict", func(m map[string]any) { m["output"] = map[string]any{"type": "string"} })
	res, err := callExtism(t, tool, "abc", executor.CallContext{})
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(res.Output, &s); err != nil || len(s) != 24 {
		t.Fatalf("output %s (%v)", res.Output, err)
	}
	le := func(b string) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	if in, h, n := le(s[0:8]), le(s[8:16]), le(s[16:24]); in != 77 || h != 77+3+12 || n != 3 {
		t.Fatalf("input_offset %d, block %d, input length %d; want 77, 92, 3", in, h, n)
	}
}

// buildExtismGo builds examples/extism-go (Extism's Go PDK, its own module)
// as a WASI reactor, as its Makefile does.
func buildExtismGo(t testing.TB) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds a multi-MB Go guest")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no go command on PATH; CI=true requires it")
		}
		t.Skip("no go command on PATH")
	}
	out := filepath.Join(t.TempDir(), "extism-go.wasm")
	cmd := exec.Command(gobin, "build", "-trimpath", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = filepath.Join("..", "examples", "extism-go")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building examples/extism-go: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The Go PDK example: its manifests (one module, two tools by #NAME) and
// its conformance case file, posture by posture.
func TestExtismGoExample(t *testing.T) {
	wasm := buildExtismGo(t)
	dir := filepath.Join("..", "examples", "extism-go")
	e := newExecutor(t)
	load := func(t *testing.T, file, posture string) *executor.Tool {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if posture != "" {
			m["sandbox"] = posture
		}
		raw, _ = json.Marshal(m)
		tool, err := e.Load(context.Background(), raw, executor.WithModule(wasm), executor.WithBaseDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tool.Close(context.Background()) })
		return tool
	}
	// The case file, as conformance runs it (manifest posture).
	var cf struct {
		Cases []struct {
			Name   string
			Input  json.RawMessage
			Expect struct {
				Output json.RawMessage
				Error  *struct{ Code toolerr.Code }
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cases", "count-vowels.cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cf); err != nil {
		t.Fatal(err)
	}
	tool := load(t, "count-vowels.tool.json", "")
	for _, c := range cf.Cases {
		res, err := tool.Invoke(context.Background(), executor.Request{Input: c.Input, Context: executor.CallContext{TenantID: "t1", RunID: "r1"}})
		if c.Expect.Error != nil {
			wantCode(t, err, c.Expect.Error.Code)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		jsonEqual(t, res.Output, string(c.Expect.Output))
	}
	// Vars per posture: the running total grows only on posture none's warm
	// instance.
	for posture, want := range map[string]int{"none": 9, "context-isolated": 3, "strict": 3} {
		tool := load(t, "count-vowels.tool.json", posture)
		var total int
		for range 3 {
			res, err := callExtism(t, tool, "hello world", executor.CallContext{})
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ Total int }
			_ = json.Unmarshal(res.Output, &out)
			total = out.Total
		}
		if total != want {
			t.Errorf("%s: total after 3 calls %d, want %d", posture, total, want)
		}
	}
	greet := load(t, "greet.tool.json", "")
	res, err := callExtism(t, greet, "John", rawConfig("greeting", "Howdy"))
	if err != nil || string(res.Output) != `"Howdy, John!"` {
		t.Fatalf("greet: %s, %v", res.Output, err)
	}
	_, err = callExtism(t, greet, "", executor.CallContext{})
	if te := wantCode(t, err, toolerr.HandlerError); te.Message != "greet: the name is empty" || te.Details["returned"] != int32(1) {
		t.Fatalf("greet empty: %s %v", te.Message, te.Details)
	}
}

// The AssemblyScript PDK example (no WASI): built with asc from
// examples/extism-as/node_modules (npm ci, .ci/deps.d/20-extism.sh). Its
// module gets a start function from the fuel pass, which is not an entry
// candidate.
func TestExtismASExample(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the AssemblyScript example with asc (seconds)")
	}
	dir := filepath.Join("..", "examples", "extism-as")
	asc := filepath.Join(dir, "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (npm ci in examples/extism-as); CI=true requires it: %v", asc, err)
		}
		t.Skipf("%s is missing (npm ci in examples/extism-as)", asc)
	}
	out := filepath.Join(t.TempDir(), "extism-as.wasm")
	cmd := exec.Command("node_modules/.bin/asc", "index.ts", "--outFile", out, "--optimize", "--use", "abort=index/myAbort")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("asc: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "shout.tool.json"))
	if err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t)
	for _, posture := range postures {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		m["sandbox"] = posture
		b, _ := json.Marshal(m)
		tool, err := e.Load(context.Background(), b, executor.WithModule(wasm))
		if err != nil {
			t.Fatalf("%s: %v", posture, err)
		}
		t.Cleanup(func() { _ = tool.Close(context.Background()) })
		for _, c := range []struct{ in, suffix, want string }{{"hello world", "", `"HELLO WORLD!"`}, {"héllo", "?!", `"HÉLLO?!"`}} {
			cc := executor.CallContext{}
			if c.suffix != "" {
				cc = rawConfig("suffix", c.suffix)
			}
			res, err := callExtism(t, tool, c.in, cc)
			if err != nil || string(res.Output) != c.want {
				t.Fatalf("%s %q: %s, %v; want %s", posture, c.in, res.Output, err, c.want)
			}
		}
		_, err = callExtism(t, tool, "", executor.CallContext{})
		if te := wantCode(t, err, toolerr.HandlerError); te.Details["returned"] != int32(1) {
			t.Fatalf("%s empty: %s %v", posture, te.Message, te.Details)
		}
	}
}

// publicResolver answers one public address for every name; the recording
// dialer below never connects to it.
type publicResolver struct{}

func (publicResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

// extism_test.go TestHTTP_allowed: http.wasm (TinyGo) GETs
// https://jsonplaceholder.typicode.com/todos/1 through sandboxd's egress
// engine. A fake resolver answers a public address and a recording dialer
// connects every dial to a loopback TLS server instead, so nothing leaves
// the machine; the test's TLS config skips verification of that server's
// certificate (it is not jsonplaceholder's).
func TestExtismHTTPAllowed(t *testing.T) {
	wasm := extismPlugin(t, "http.wasm")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/todos/1" || r.Host != "jsonplaceholder.typicode.com" {
			http.Error(w, "unexpected "+r.Host+r.URL.Path, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"userId": 1, "id": 1, "title": "delectus aut autem", "completed": false}`))
	}))
	defer srv.Close()
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithEgressResolver(publicResolver{}).WithEgressDialer(dial).WithEgressTLS(&tls.Config{InsecureSkipVerify: true})
	})
	for _, posture := range postures {
		tool := mustLoadExtism(t, e, wasm, "run_test", posture, withNetwork("allowlist", "jsonplaceholder.typicode.com"))
		res, err := callExtism(t, tool, "", executor.CallContext{})
		if err != nil {
			t.Fatalf("%s: %v", posture, err)
		}
		jsonEqual(t, res.Output, `{"userId": 1, "id": 1, "title": "delectus aut autem", "completed": false}`)
		if len(res.Egress) != 1 || !res.Egress[0].Allowed || res.Egress[0].Status != 200 {
			t.Fatalf("%s: egress audit %+v", posture, res.Egress)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range dialed {
		if a != "93.184.216.34:443" {
			t.Fatalf("dialled %s", a)
		}
	}
	if len(dialed) == 0 {
		t.Fatal("nothing was dialled")
	}
}

// A recycled context-isolated instance (the fuel pass finds Extism plug-ins
// resettable: extism:host/env keeps no per-instance state but vars, and
// begin empties those) starts every call with no vars. The Go PDK example
// keeps a running total in a var (so does go-sdk's Rust count_vowels,
// TestExtismGrownInstanceRecycled, whose memory grows in every call).
func TestExtismRecycledInstanceHasNoVars(t *testing.T) {
	wasm := buildExtismGo(t)
	e := newExecutor(t)
	tool := mustLoadExtism(t, e, wasm, "count_vowels", "context-isolated", nil)
	for i := 0; i < 200 && tool.Stats().RecycledCalls < 3; i++ {
		res, err := callExtism(t, tool, "aaa", executor.CallContext{})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Output) != `{"count":3,"total":3,"vowels":"aeiouAEIOU"}` {
			t.Fatalf("call %d: %s: a var survived the call", i+1, res.Output)
		}
		time.Sleep(time.Millisecond) // let the refill goroutine recycle
	}
	if n := tool.Stats().RecycledCalls; n < 3 {
		t.Fatalf("only %d calls were served by a recycled instance", n)
	}
}

// Extism host calls are charged and interruptible like every host function:
// a loop of kernel calls is stopped by the fuel budget and by cpuMs.
func TestExtismHostCallsChargedAndInterrupted(t *testing.T) {
	wasm := watModule(t, "hostile")
	budget := newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(5_000_000) })
	tool := mustLoadExtism(t, budget, wasm, "spin_host", "strict", nil)
	res, err := callExtism(t, tool, "abc", executor.CallContext{})
	te := wantCode(t, err, toolerr.LimitsExceeded)
	if te.Details["limit"] != "fuel" || res == nil || res.Usage.Fuel < 5_000_000 {
		t.Fatalf("fuel: %s %v %+v", te.Message, te.Details, res)
	}
	cpu := newExecutor(t)
	tool = mustLoadExtism(t, cpu, wasm, "spin_host", "strict", func(m map[string]any) { m["limits"] = map[string]any{"memMB": 16, "cpuMs": 50} })
	start := time.Now()
	_, err = callExtism(t, tool, "abc", executor.CallContext{})
	te = wantCode(t, err, toolerr.LimitsExceeded)
	if te.Details["limit"] != "cpuMs" {
		t.Fatalf("cpu: %s %v", te.Message, te.Details)
	}
	t.Logf("a kernel-call loop stopped at cpuMs 50 after %v wall", time.Since(start))
}

// Tiny blocks are charged with the host's record of them: a guest that
// allocates 1-byte blocks until alloc returns 0 gets about memMB / (13 +
// 64) of them, not memMB / 13, and the call stays within memMB (the guest
// returns the count; alloc's refusal makes the failure limits-exceeded).
func TestExtismTinyAllocsCharged(t *testing.T) {
	wasm := watModule(t, "hostile")
	e := newExecutor(t)
	tool := mustLoadExtism(t, e, wasm, "tiny_allocs", "strict", func(m map[string]any) {
		m["limits"] = map[string]any{"memMB": 16, "cpuMs": 10000}
	})
	res, err := callExtism(t, tool, "", executor.CallContext{})
	te := wantCode(t, err, toolerr.LimitsExceeded)
	if te.Details["limit"] != "memMB" || res == nil || res.Usage.PeakMemMB > 16 {
		t.Fatalf("%s %v %+v", te.Message, te.Details, res)
	}
	t.Logf("%s (peak %.2f MB)", te.Message, res.Usage.PeakMemMB)
	var n int
	if _, err := fmt.Sscanf(te.Message, "handler failed (returned %d)", &n); err != nil || n <= 0 || n > (16<<20)/(13+64) {
		t.Fatalf("blocks %d (%v) from %q", n, err, te.Message)
	}
}

// extismFixture loads testdata/wasm/NAME.wasm as an Extism tool entered at
// #entry.
func extismFixture(t *testing.T, e *executor.Executor, name, entry string, edit func(m map[string]any)) (*executor.Tool, error) {
	t.Helper()
	b, err := os.ReadFile(fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return loadExtism(t, e, b, entry, "strict", edit)
}

// A single var_set larger than the whole var store is the store's refusal,
// as in Extism ("Variable store is full"): handler-error with details.vars
// "full", not a trap for a block over the copy cap.
func TestExtismVarSetOverStore(t *testing.T) {
	e := newExecutor(t)
	tool, err := extismFixture(t, e, "g04_extism_kernel", "var_too_big", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = callExtism(t, tool, "", executor.CallContext{})
	te := wantCode(t, err, toolerr.HandlerError)
	if te.Details["vars"] != "full" || !strings.Contains(te.Message, "variable store is full") {
		t.Fatalf("%s %v", te.Message, te.Details)
	}
}

// A response header sent several times reaches an Extism plug-in's
// http_headers joined with "," (go-sdk v1.7.1's rule), under a lower-case
// name.
func TestExtismRepeatedResponseHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b c")
		w.Header().Add("X-Multi", "d")
		w.Header().Set("X-Single", "one, two")
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	tool, err := extismFixture(t, e, "g04_extism_kernel", "headers", withNetwork("allowlist", "api.test:"+port))
	if err != nil {
		t.Fatal(err)
	}
	res, err := callExtism(t, tool, `{"url":"http://api.test:`+port+`/"}`, executor.CallContext{})
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	if err := json.Unmarshal(res.Output, &h); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if h["x-multi"] != "a,b c,d" || h["x-single"] != "one, two" {
		t.Fatalf("headers %v; want x-multi \"a,b c,d\" and x-single \"one, two\"", h)
	}
}

// A module that imports nothing from extism:host/env (pure compute, WASI at
// most) is an Extism plug-in when modulePath names its entry with #NAME:
// Extism calls any export. Without a suffix (or with #handle) it is read as
// ABI v1, which finds no entry point in it.
func TestExtismWASIOnlyPlugin(t *testing.T) {
	e := newExecutor(t)
	for _, c := range []struct {
		entry string
		code  toolerr.Code // "" for success
		msg   string
	}{
		{"compute", "", ""},
		{"fail", toolerr.HandlerError, "handler returned 3"},
		{"unreachable", toolerr.HandlerTrap, "unreachable"},
	} {
		tool, err := extismFixture(t, e, "extism_wasi_only", c.entry, nil)
		if err != nil {
			t.Fatalf("#%s: %v", c.entry, err)
		}
		if tool.Style() != executor.Reactor {
			t.Fatalf("#%s: style %s", c.entry, tool.Style())
		}
		res, err := callExtism(t, tool, "abc", executor.CallContext{})
		if c.code == "" {
			if err != nil || string(res.Output) != "null" {
				t.Fatalf("#%s: %v %+v", c.entry, err, res)
			}
			continue
		}
		if te := wantCode(t, err, c.code); !strings.Contains(te.Message, c.msg) {
			t.Fatalf("#%s: %s", c.entry, te.Message)
		}
	}
	for _, entry := range []string{"", "handle"} {
		_, err := extismFixture(t, e, "extism_wasi_only", entry, nil)
		if te := wantCode(t, err, toolerr.HandlerShapeInvalid); !strings.Contains(te.Message, "no entry point") {
			t.Fatalf("entry %q: %s", entry, te.Message)
		}
	}
	// go-sdk's noop.wasm: WASI only, entered at #run_test.
	tool := mustLoadExtism(t, e, extismPlugin(t, "noop.wasm"), "run_test", "strict", nil)
	if _, err := callExtism(t, tool, "", executor.CallContext{}); err != nil {
		t.Fatalf("noop.wasm#run_test: %v", err)
	}
}
