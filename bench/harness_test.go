package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest/exectest"
	"github.com/sandboxd/sandboxd/manifest"
)

// hist is a log-linear latency histogram: bucket i holds durations in
// [1.01^i, 1.01^(i+1)) ns, so quantiles carry at most 1% error.
type hist struct {
	counts map[int]int
	n      int
}

func newHist() *hist { return &hist{counts: map[int]int{}} }

var logStep = math.Log(1.01)

func (h *hist) add(d time.Duration) {
	if d < 1 {
		d = 1
	}
	h.counts[int(math.Log(float64(d))/logStep)]++
	h.n++
}

// quantile returns the lower bound of the bucket holding quantile q.
func (h *hist) quantile(q float64) time.Duration {
	keys := make([]int, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	want := int(math.Ceil(q * float64(h.n)))
	seen := 0
	for _, k := range keys {
		seen += h.counts[k]
		if seen >= want {
			return time.Duration(math.Exp(float64(k)*logStep + logStep/2))
		}
	}
	return 0
}

// busyWait spins for d, yielding to other goroutines (the pool's refill),
// so that the call after it meets a pool that had time to refill without
// the thread going idle.
func busyWait(d time.Duration) {
	for until := time.Now().Add(d); time.Now().Before(until); {
		runtime.Gosched()
	}
}

// result is one measured case.
type result struct {
	p50, p99 time.Duration
	allocs   float64 // per call
	bytes    float64 // per call
	n        int
}

func root(tb testing.TB) string {
	tb.Helper()
	p, err := filepath.Abs("..")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func readFile(tb testing.TB, p string) []byte {
	tb.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// echoSchemas are the schemas of the validated echo: {"data": string}.
const (
	echoInput  = `{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`
	echoOutput = echoInput
	anySchema  = `{}`
)

// toolManifest is a manifest for module at path; validated picks the echo
// schemas or {} (no constraint: the JSON is still parsed).
func toolManifest(id, ref string, validated bool, posture string, cpuMs int) []byte {
	in, out := anySchema, anySchema
	if validated {
		in, out = echoInput, echoOutput
	}
	return []byte(fmt.Sprintf(`{"id":%q,"description":"bench","version":"1.0.0","sandbox":%q,
"input":%s,"output":%s,"codeArtifactRef":%s,"limits":{"memMB":64,"cpuMs":%d}}`, id, posture, in, out, ref, cpuMs))
}

func fsRef(path string) string {
	return fmt.Sprintf(`{"kind":"filesystem","modulePath":%q}`, path)
}

// newExecutor is an executor in dev mode (filesystem refs) with its own
// compile cache under dir and a pool of at most pool instances per tool;
// opts change the configuration further (e.g. recycling off).
func newExecutor(tb testing.TB, dir string, pool int, opts ...func(executor.Config) executor.Config) *executor.Executor {
	tb.Helper()
	base := func(c executor.Config) executor.Config {
		return c.WithDevMode(true).WithCacheDir(dir).WithGuestOutput(nil, nil).WithPoolSize(pool)
	}
	return exectest.Executor(tb, append([]func(executor.Config) executor.Config{base}, opts...)...)
}

func loadTool(tb testing.TB, e *executor.Executor, m []byte) *executor.Tool {
	tb.Helper()
	return exectest.Load(tb, e, m)
}

// payload is the echo input carrying n bytes of string data.
func payload(n int) []byte {
	return []byte(`{"data":"` + strings.Repeat("x", n) + `"}`)
}

// nativeEcho is the echo logic as a native Go function: a copy of the
// input bytes, as the Wasm guests produce.
func nativeEcho(in []byte) []byte { return append([]byte(nil), in...) }

// nativeTool validates like sandboxd around nativeEcho.
func nativeValidated(mt *manifest.Tool, in []byte) (json.RawMessage, error) {
	v, err := mt.ValidateInput(in)
	if err != nil {
		return nil, err
	}
	return mt.ValidateOutput(nativeEcho(v))
}

func newExtism(tb testing.TB, wasm []byte, timeout time.Duration, closeOnDone bool) *extism.CompiledPlugin {
	tb.Helper()
	rc := wazero.NewRuntimeConfig()
	if closeOnDone {
		rc = rc.WithCloseOnContextDone(true)
	}
	m := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm, Name: "main"}}}
	if timeout > 0 {
		m.Timeout = uint64(timeout / time.Millisecond)
	}
	cp, err := extism.NewCompiledPlugin(context.Background(), m, extism.PluginConfig{RuntimeConfig: rc}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cp.Close(context.Background()) })
	return cp
}

func extismInstance(tb testing.TB, cp *extism.CompiledPlugin) *extism.Plugin {
	tb.Helper()
	p, err := cp.Instance(context.Background(), extism.PluginInstanceConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func extismCall(p *extism.Plugin, fn string, in []byte) ([]byte, error) {
	rc, out, err := p.Call(fn, in)
	if err != nil {
		return nil, err
	}
	if rc != 0 {
		return nil, fmt.Errorf("%s returned %d", fn, rc)
	}
	return out, nil
}

// rss returns the process's resident set size in bytes (Linux).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

type extismInstanceConfigT = extism.PluginInstanceConfig

// interleaved measures the cases round-robin, rounds times, each case for
// slice per round (after warm calls once), so a change in the shared
// machine's load falls on every case alike. Results are in cases' order.
func interleaved(cases []func() error, warm, rounds, maxPerRound int, slice time.Duration) ([]result, error) {
	hs := make([]*hist, len(cases))
	mallocs := make([]uint64, len(cases))
	bytes := make([]uint64, len(cases))
	for i, fn := range cases {
		hs[i] = newHist()
		for j := 0; j < warm; j++ {
			if err := fn(); err != nil {
				return nil, err
			}
		}
	}
	var m0, m1 runtime.MemStats
	for r := 0; r < rounds; r++ {
		for i, fn := range cases {
			runtime.ReadMemStats(&m0)
			end := time.Now().Add(slice)
			for j := 0; j < maxPerRound && (j < 3 || time.Now().Before(end)); j++ {
				t0 := time.Now()
				if err := fn(); err != nil {
					return nil, err
				}
				hs[i].add(time.Since(t0))
			}
			runtime.ReadMemStats(&m1)
			mallocs[i] += m1.Mallocs - m0.Mallocs
			bytes[i] += m1.TotalAlloc - m0.TotalAlloc
		}
	}
	out := make([]result, len(cases))
	for i, h := range hs {
		out[i] = result{p50: h.quantile(0.5), p99: h.quantile(0.99), n: h.n,
			allocs: float64(mallocs[i]) / float64(h.n), bytes: float64(bytes[i]) / float64(h.n)}
	}
	return out, nil
}

// noRecycle turns instance recycling off: a pooled context-isolated call
// then takes a never-used instance.
func noRecycle(c executor.Config) executor.Config { return c.WithRecycling(false) }
