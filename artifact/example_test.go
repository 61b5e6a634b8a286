package artifact_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/artifact"
)

// Push a two-module pack to an OCI image layout directory and resolve one
// module back by tag.
func ExampleOCI_Push() {
	dir, _ := os.MkdirTemp("", "example-layout-")
	defer os.RemoveAll(dir)
	o, _ := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(filepath.Join(dir, "cache")))
	defer o.Close()
	ctx := context.Background()

	wasm := []byte("\x00asm\x01\x00\x00\x00") // the smallest valid module
	layout := "oci-layout:" + filepath.Join(dir, "pack")
	art, err := o.Push(ctx, layout+":v1", "2026.11.29", []artifact.PushModule{
		{Title: "tools/a.wasm", Wasm: wasm},
		{Title: "tools/b.wasm", Wasm: wasm},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(art.Layout, art.Version, art.Modules())

	m, err := o.Resolve(ctx, artifact.Ref{Kind: artifact.KindOCI, ImageRef: layout + ":v1", ModulePath: "tools/b.wasm", ArtifactVersion: "2026.11.29"})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(m.Bytes), m.Digest == artifact.Digest(wasm))
	// Output:
	// wasm 2026.11.29 [tools/a.wasm tools/b.wasm]
	// 8 true
}
