package artifact

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// TestModuleLayerBombs: resolving a module from an image's layers
// (scanLayer) applies a pack image's decompression-ratio cap: a layer that
// unpacks to more than 256 times its size (beyond the 64 MiB floor) is
// refused naming the cap, gzip or zstd, whether or not it holds the
// module; one under the floor reads on. Before, only the 4 GiB cap bound
// it (a few KiB of gzip read as 4 GiB of tar).
func TestModuleLayerBombs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		layer func() [2]string
		msg   string
	}{
		{"gzip, beside the module", func() [2]string { return zeroLayer(t, compGzip, "var/zero", 80<<20) }, "(the decompression-ratio cap)"},
		{"zstd, the module itself", func() [2]string { return zeroLayer(t, compZstd, "m.wasm", 200<<20) }, "(the decompression-ratio cap)"},
		{"zstd, under the floor", func() [2]string { return zeroLayer(t, compZstd, "var/zero", 48<<20) }, "no file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := writeImage(t, t.TempDir(), tc.layer())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := packOCI(t, NewOCIConfig()).Resolve(ctx, Ref{Kind: KindOCI, ImageRef: ref, ModulePath: "m.wasm"})
			t.Logf("%v after %s", err, time.Since(start))
			if te := toolerr.As(err); te == nil || !strings.Contains(te.Message, tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
}
