package wasmbin

import (
	"context"
	"os"
	"runtime"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// BenchmarkInstantiateGoEcho is wazero's InstantiateModule (and Close) of the
// standard-Go reactor fixture, compiled once: as built (38,212 active data
// segments), merged (one active segment), passive without calling the
// init export (what an instance restored from a memory image pays) and
// passive with it.
func BenchmarkInstantiateGoEcho(b *testing.B) {
	orig, err := os.ReadFile("../../testdata/wasm/go_echo_reactor.wasm")
	if err != nil {
		b.Fatal(err)
	}
	passive, export := PassiveData(orig)
	if export == "" {
		b.Fatal("PassiveData did not apply to go_echo_reactor.wasm")
	}
	for _, c := range []struct {
		name string
		bin  []byte
		init string
	}{
		{"original", orig, ""},
		{"merged", MergeData(orig), ""},
		{"passive-no-init", passive, ""},
		{"passive+init", passive, export},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
			defer r.Close(ctx)
			cm, err := r.CompileModule(ctx, c.bin)
			if err != nil {
				b.Fatal(err)
			}
			if err := stubImports(ctx, r, cm); err != nil { // nothing here calls them
				b.Fatal(err)
			}
			mc := wazero.NewModuleConfig().WithName("").WithStartFunctions()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				mod, err := r.InstantiateModule(ctx, cm, mc)
				if err != nil {
					b.Fatal(err)
				}
				if c.init != "" {
					if _, err := mod.ExportedFunction(c.init).Call(ctx); err != nil {
						b.Fatal(err)
					}
				}
				_ = mod.Close(ctx)
			}
			b.StopTimer()
			b.ReportMetric(retainedPerInstance(b, ctx, r, cm, mc, c.init), "heap-B/instance")
		})
	}
}

// retainedPerInstance is the Go heap an open instance holds (its linear
// memory included), measured over 16 instances kept open at once.
func retainedPerInstance(b *testing.B, ctx context.Context, r wazero.Runtime, cm wazero.CompiledModule, mc wazero.ModuleConfig, init string) float64 {
	const n = 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	mods := make([]api.Module, n)
	for i := range mods {
		mod, err := r.InstantiateModule(ctx, cm, mc)
		if err != nil {
			b.Fatal(err)
		}
		if init != "" {
			if _, err := mod.ExportedFunction(init).Call(ctx); err != nil {
				b.Fatal(err)
			}
		}
		mods[i] = mod
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, mod := range mods {
		_ = mod.Close(ctx)
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
}

// BenchmarkPassiveData is the load-time cost of the rewrite of the
// standard-Go reactor fixture.
func BenchmarkPassiveData(b *testing.B) {
	orig, err := os.ReadFile("../../testdata/wasm/go_echo_reactor.wasm")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(orig)))
	for range b.N {
		if _, export := PassiveData(orig); export == "" {
			b.Fatal("did not apply")
		}
	}
}
