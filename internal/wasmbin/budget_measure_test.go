package wasmbin

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// TestMeasureCompileShapes prints, for every module in $SANDBOXD_MEASURE_DIR
// (or the repository's fixtures), its heaviest function's shape and wazero's
// compile time: the measurements DefaultBudget is derived from. It is a
// measurement, not a check; run it with SANDBOXD_MEASURE=1.
func TestMeasureCompileShapes(t *testing.T) {
	if os.Getenv("SANDBOXD_MEASURE") == "" {
		t.Skip("set SANDBOXD_MEASURE=1 (and optionally SANDBOXD_MEASURE_DIR)")
	}
	dir := os.Getenv("SANDBOXD_MEASURE_DIR")
	if dir == "" {
		dir = "../../testdata/wasm"
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		shapes, err := Shapes(b)
		if err != nil {
			t.Logf("%s: %v", filepath.Base(p), err)
			continue
		}
		var heavy FuncShape
		var maxLocals, maxBody, maxCarried uint64
		for _, s := range shapes {
			if s.Weight > heavy.Weight {
				heavy = s
			}
			maxLocals, maxBody, maxCarried = max(maxLocals, s.Locals), max(maxBody, s.BodyBytes), max(maxCarried, s.Carried)
		}
		ctx := context.Background()
		r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
		wasi_snapshot_preview1.MustInstantiate(ctx, r)
		start := time.Now()
		_, cerr := r.CompileModule(ctx, b)
		el := time.Since(start)
		r.Close(ctx)
		t.Logf("%-28s %9d B  funcs %6d  heaviest f%d locals %6d body %8d loops %5d depth %5d carried %8d weight %.2e  maxLocals %6d maxBody %8d maxCarried %7d compile %v %v",
			filepath.Base(p), len(b), len(shapes), heavy.Index, heavy.Locals, heavy.BodyBytes, heavy.Loops, heavy.MaxDepth, heavy.Carried, float64(heavy.Weight), maxLocals, maxBody, maxCarried, el.Round(time.Millisecond), cerr)
	}
}
