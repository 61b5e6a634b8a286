package executor

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// entropyManifest runs conformance/testdata/deterministic/entropy.wasm,
// whose output is {"t": wall clock ns, "m": monotonic ns, "r": 8 random bytes}.
const entropyManifest = `{
  "id": "test.entropy", "version": "1.0.0", "description": "clocks and randomness",
  "input": {"$schema": "https://json-schema.org/draft/2020-12/schema"},
  "output": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
  "limits": {"memMB": 16, "cpuMs": 1000},
  "codeArtifactRef": {"kind": "filesystem", "modulePath": "entropy.wasm"}
}`

type entropy struct{ T, M, R uint64 }

func entropyOf(t *testing.T, e *Executor, n int) []entropy {
	t.Helper()
	wasm, err := os.ReadFile("../conformance/testdata/deterministic/entropy.wasm")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tool, err := e.Load(ctx, []byte(entropyManifest), WithModule(wasm))
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close(ctx)
	var out []entropy
	for range n {
		res, err := tool.Invoke(ctx, Request{Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		var v entropy
		if err := json.Unmarshal(res.Output, &v); err != nil {
			t.Fatalf("%s: %v", res.Output, err)
		}
		out = append(out, v)
	}
	return out
}

func newTestExecutor(t *testing.T, seed uint64, deterministic bool) *Executor {
	t.Helper()
	cfg := NewConfig().WithCacheDir("").WithPoolSize(0)
	var (
		e   *Executor
		err error
	)
	if deterministic {
		e, err = NewDeterministic(context.Background(), cfg, seed)
	} else {
		e, err = New(context.Background(), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func TestDeterministicClocksAndRandom(t *testing.T) {
	a := entropyOf(t, newTestExecutor(t, 42, true), 2)
	b := entropyOf(t, newTestExecutor(t, 42, true), 1)
	// Each fresh instance reads the wall clock first (+1 ms), then the
	// monotonic clock (+1 ms more).
	want := entropy{T: uint64(DeterministicEpoch) + 1_000_000, M: 2_000_000}
	for i, v := range append(a, b...) {
		if v.T != want.T || v.M != want.M {
			t.Errorf("call %d: clocks %d, %d; want %d, %d", i, v.T, v.M, want.T, want.M)
		}
		if v.R != a[0].R {
			t.Errorf("call %d: random %d, want %d (same seed)", i, v.R, a[0].R)
		}
	}
	if c := entropyOf(t, newTestExecutor(t, 43, true), 1); c[0].R == a[0].R {
		t.Errorf("seeds 42 and 43 give the same random bytes %d", c[0].R)
	}
	if seed, ok := newTestExecutor(t, 9, true).Deterministic(); !ok || seed != 9 {
		t.Errorf("Deterministic() = %d, %v", seed, ok)
	}
}

func TestNotDeterministicByDefault(t *testing.T) {
	e := newTestExecutor(t, 0, false)
	if _, ok := e.Deterministic(); ok {
		t.Error("a plain executor reports deterministic")
	}
	v := entropyOf(t, e, 2)
	if v[0].T < uint64(DeterministicEpoch) || v[0].R == v[1].R {
		t.Errorf("real clocks and randomness expected: %+v", v)
	}
}
