//go:build ignore

// filter.go deletes the modules named on the command line that wazero does
// not compile with CoreFeaturesV2 (binaryen sometimes emits typed function
// references, which wazero does not support). Used by gen-ttf.sh.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func main() {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	dropped := 0
	for _, f := range os.Args[1:] {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c, err := r.CompileModule(ctx, b)
		if err != nil {
			os.Remove(f)
			dropped++
			continue
		}
		c.Close(ctx)
	}
	fmt.Printf("kept %d of %d modules\n", len(os.Args)-1-dropped, len(os.Args)-1)
}
