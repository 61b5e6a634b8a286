package wasmbin

import (
	"context"
	"os"
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
		})
	}
}
