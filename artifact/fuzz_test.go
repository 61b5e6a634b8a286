package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

// FuzzParseImageRef: any string parses or fails cleanly; a pinned result
// always carries a digest that is safe to use as a file name.
func FuzzParseImageRef(f *testing.F) {
	d := Digest([]byte("x"))
	for _, s := range []string{"localhost:5000/a/b:1", "a/b@" + d, "oci-layout:/tmp/x:tag", "oci-layout:/tmp/x@" + d, "oci-layout:", "x@sha256:../../etc", "UPPER/Case:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseImageRef(s, map[string]bool{"localhost:5000": true})
		if err != nil {
			var te *toolerr.Error
			if !errors.As(err, &te) || te.Code != toolerr.ArtifactUnavailable {
				t.Fatalf("%q: error %v is not artifact-unavailable", s, err)
			}
			return
		}
		if r.pinned() && checkDigest(r.digest) != nil {
			t.Fatalf("%q: pinned with a bad digest %q", s, r.digest)
		}
		if !r.pinned() && r.layout == "" && r.tag == "" {
			t.Fatalf("%q: neither tag nor digest", s)
		}
	})
}

// FuzzLayoutResolve feeds arbitrary manifests and layers through an OCI
// layout: resolving never panics and every failure is an artifact-* error.
func FuzzLayoutResolve(f *testing.F) {
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	blobs, manifest, err := BuildArtifact("1", []PushModule{{Title: "m.wasm", Wasm: wasm}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(manifest, wasm)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "m.wasm", Mode: 0o644, Size: int64(len(wasm)), Typeflag: tar.TypeReg})
	tw.Write(wasm)
	tw.Close()
	cfg := []byte(`{}`)
	img, _ := json.Marshal(manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest,
		Config:      &descriptor{MediaType: mediaTypeOCIConfig, Digest: Digest(cfg), Size: 2},
		Layers:      []descriptor{{MediaType: mediaTypeOCILayer, Digest: Digest(tb.Bytes()), Size: int64(tb.Len())}},
		Annotations: map[string]string{AnnotationVersion: "1"}})
	f.Add(img, tb.Bytes())
	f.Add([]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:`+strings.Repeat("0", 64)+`","size":-5}]}`), []byte{})
	f.Fuzz(func(t *testing.T, manifest, layer []byte) {
		dir, err := os.MkdirTemp("", "fuzz-layout-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		all := map[string][]byte{Digest(layer): layer, Digest(cfg): cfg}
		for d, b := range blobs {
			all[d] = b
		}
		if err := writeLayout(dir, "t", all, manifest, mediaTypeOCIManifest); err != nil {
			t.Fatal(err)
		}
		o, err := NewOCI(NewOCIConfig().WithCacheDir(filepath.Join(dir, "cache")).WithMaxBlobSize(1 << 20))
		if err != nil {
			t.Fatal(err)
		}
		m, err := o.Resolve(context.Background(), Ref{Kind: KindOCI, ImageRef: LayoutPrefix + dir + ":t", ModulePath: "m.wasm", ArtifactVersion: "1"})
		if err != nil {
			var te *toolerr.Error
			if !errors.As(err, &te) || !strings.HasPrefix(string(te.Code), "artifact-") {
				t.Fatalf("error %v is not an artifact-* error", err)
			}
			return
		}
		if m.Digest != Digest(m.Bytes) {
			t.Fatal("module digest does not match its bytes")
		}
	})
}
