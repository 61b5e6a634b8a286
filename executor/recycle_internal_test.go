package executor

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// A snapshot restores memory exactly, whatever mix of zero and non-zero
// chunks it saved and however the memory was scribbled on since.
func TestSnapshotRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		size := rng.IntN(20*chunk) + 1
		orig := make([]byte, size)
		for off := 0; off < size; off += chunk {
			switch rng.IntN(3) {
			case 0: // all zero
			case 1: // one non-zero byte somewhere in the chunk
				orig[min(off+rng.IntN(chunk), size-1)] = byte(rng.IntN(255) + 1)
			default:
				for i := off; i < min(off+chunk, size); i++ {
					orig[i] = byte(rng.Uint32())
				}
			}
		}
		s := &state{memSize: size, runs: nonZeroRuns(orig)}
		mem := append([]byte(nil), orig...)
		for i := rng.IntN(size); i < size; i += rng.IntN(chunk) + 1 {
			mem[i] = byte(rng.Uint32())
		}
		s.restore(mem)
		if !bytes.Equal(mem, orig) {
			t.Fatalf("trial %d (size %d): restore differs", trial, size)
		}
		var want int64
		for off := 0; off < size; off += chunk {
			if !allZero(orig[off:min(off+chunk, size)]) {
				want += int64(min(chunk, size-off))
			}
		}
		if got := (&snapshot{st: s, own: true}).size(); got != want {
			t.Fatalf("trial %d: snapshot holds %d bytes, want %d", trial, got, want)
		}
	}
}

// save decides recycling on the pass's verdict alone: the F02 module (not
// resettable, exporting its own "sandboxd.dirty") instantiated as is gives
// no snapshot without a resettable verdict, whatever it exports; and a
// resettable verdict whose globals the instance does not export is not the
// module the pass produced, so it gives none either.
func TestSaveFollowsVerdict(t *testing.T) {
	ctx := context.Background()
	bin, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", "f02_dirty_export.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	host := r.NewHostModuleBuilder("sandboxd_v1")
	for _, name := range []string{"input_read", "output_set"} {
		host.NewFunctionBuilder().WithFunc(func(uint32, uint32) uint32 { return 0 }).Export(name)
	}
	if _, err := host.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if mod.ExportedGlobal(fuel.DirtyExport) == nil {
		t.Fatal("the fixture no longer exports sandboxd.dirty")
	}
	if s := save(mod, fuel.Verdict{}); s != nil {
		t.Fatal("a module the pass did not find resettable got a snapshot through its own sandboxd.dirty export")
	}
	if s := save(mod, fuel.Verdict{Resettable: true, Globals: 2}); s != nil {
		t.Fatal("a snapshot was taken although the pass's global exports are missing")
	}
	if s := save(mod, fuel.Verdict{Resettable: true}); s == nil {
		t.Fatal("a resettable verdict with the dirty flag present gave no snapshot")
	}
}
