package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// tarEntry is one entry of a test layer: a regular file unless typ is set.
type tarEntry struct {
	name string
	data string
	typ  byte
	link string
	size int64 // a header size different from len(data) (then data is padded with zeros)
}

func tarLayerBytes(t *testing.T, comp string, entries ...tarEntry) ([]byte, string) {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typ, Linkname: e.link, ModTime: time.Unix(0, 0)}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
			if e.size > 0 {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.data))
			if pad := h.Size - int64(len(e.data)); pad > 0 {
				tw.Write(make([]byte, pad))
			}
		}
	}
	tw.Close()
	switch comp {
	case compGzip:
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(raw.Bytes())
		zw.Close()
		return z.Bytes(), mediaTypeOCILayerGzip
	case compZstd:
		var z bytes.Buffer
		zw, _ := zstd.NewWriter(&z)
		zw.Write(raw.Bytes())
		zw.Close()
		return z.Bytes(), mediaTypeOCILayerZstd
	}
	return raw.Bytes(), mediaTypeOCILayer
}

// writeImage writes an OCI layout at dir whose image (an image config, so
// PackTar) has layers, tagged "1"; it returns the oci-layout: ref.
func writeImage(t *testing.T, dir string, layers ...[2]string) string {
	t.Helper()
	blobs := map[string][]byte{}
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	doc := manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest,
		Config: &descriptor{MediaType: mediaTypeOCIConfig, Digest: Digest(cfg), Size: int64(len(cfg))}}
	blobs[Digest(cfg)] = cfg
	for _, l := range layers {
		b := []byte(l[0])
		blobs[Digest(b)] = b
		doc.Layers = append(doc.Layers, descriptor{MediaType: l[1], Digest: Digest(b), Size: int64(len(b))})
	}
	m, _ := json.Marshal(doc)
	if err := writeLayout(dir, "1", blobs, m, mediaTypeOCIManifest); err != nil {
		t.Fatal(err)
	}
	return LayoutPrefix + dir + ":1"
}

func layer(t *testing.T, comp string, entries ...tarEntry) [2]string {
	b, mt := tarLayerBytes(t, comp, entries...)
	return [2]string{string(b), mt}
}

func packOCI(t *testing.T, cfg OCIConfig) *OCI {
	t.Helper()
	o, err := NewOCI(cfg.WithCacheDir(filepath.Join(t.TempDir(), "cache")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func openPack(t *testing.T, o *OCI, ref string) (*PackImage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return o.OpenPackImage(ctx, ref)
}

// TestPackImageTarLayers: tar layers apply in order (later files win),
// whiteouts and opaque whiteouts hide lower files, only /app is kept, and
// gzip, zstd and plain layers all read.
func TestPackImageTarLayers(t *testing.T) {
	ref := writeImage(t, t.TempDir(),
		layer(t, compGzip,
			tarEntry{name: "etc/passwd", data: "root"},
			tarEntry{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"}, // outside /app: read past
			tarEntry{name: "app/", typ: tar.TypeDir},
			tarEntry{name: "app/index.json", data: "v1"},
			tarEntry{name: "app/dist/a.wasm", data: "a1"},
			tarEntry{name: "app/dist/gone.wasm", data: "g"},
			tarEntry{name: "app/old/x", data: "x"}),
		layer(t, compZstd,
			tarEntry{name: "./app/index.json", data: "v2"},
			tarEntry{name: "app/dist/.wh.gone.wasm", typ: tar.TypeReg},
			tarEntry{name: "app/old/.wh..wh..opq", typ: tar.TypeReg},
			tarEntry{name: "app/old/y", data: "y"}),
		layer(t, compNone, tarEntry{name: "/app/dist/b.wasm", data: "b"}, tarEntry{name: "app/link", typ: tar.TypeSymlink, link: "x"}),
		layer(t, compNone, tarEntry{name: "app/link/", typ: tar.TypeDir}, tarEntry{name: "app/link/c", data: "c"})) // a directory replaces the link
	p, err := openPack(t, packOCI(t, NewOCIConfig()), ref)
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout != PackTar || p.Root != "app" {
		t.Fatalf("layout %s root %s", p.Layout, p.Root)
	}
	want := []string{"app/dist/a.wasm", "app/dist/b.wasm", "app/index.json", "app/link/c", "app/old/y"}
	if got := p.Files(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", got, want)
	}
	if b, err := fs.ReadFile(p.FS(), "app/index.json"); err != nil || string(b) != "v2" {
		t.Fatalf("index.json = %q, %v; want the top layer's", b, err)
	}
	if b, err := fs.ReadFile(p.FS(), "app/link/c"); err != nil || string(b) != "c" {
		t.Fatalf("app/link/c = %q, %v: a directory entry replaces a lower link", b, err)
	}
	if _, err := fs.ReadFile(p.FS(), "etc/passwd"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file outside /app is readable: %v", err)
	}
}

// TestPackImageHostile: each hostile image is refused with its code.
func TestPackImageHostile(t *testing.T) {
	small := NewOCIConfig().WithMaxBlobSize(1 << 20)
	big := strings.Repeat("z", 900<<10)
	for _, tc := range []struct {
		name   string
		cfg    OCIConfig
		layers func() [][2]string
		read   string // the file whose read is refused ("" when opening is)
		code   toolerr.Code
		msg    string
	}{
		{"a ../ entry", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compGzip, tarEntry{name: "app/index.json", data: "{}"}, tarEntry{name: "../x", data: "x"})}
		}, "", toolerr.ArtifactRefused, "leaves the image root"},
		{"a ../ inside the path", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compNone, tarEntry{name: "app/dist/../../../etc/x", data: "x"})}
		}, "", toolerr.ArtifactRefused, "leaves the image root"},
		{"a symlink module", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compGzip, tarEntry{name: "app/dist/m.wasm", typ: tar.TypeSymlink, link: "/etc/passwd"})}
		}, "app/dist/m.wasm", toolerr.ArtifactRefused, "is a symbolic link"},
		{"a symlinked directory", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compGzip, tarEntry{name: "app/dist", typ: tar.TypeSymlink, link: "/etc"}, tarEntry{name: "app/dist/m.wasm", data: "m"})}
		}, "app/dist/m.wasm", toolerr.ArtifactRefused, "/app/dist in layer"},
		{"/app a symlink", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compGzip, tarEntry{name: "app", typ: tar.TypeSymlink, link: "/srv"}), layer(t, compGzip, tarEntry{name: "app/index.json", data: "{}"})}
		}, "app/index.json", toolerr.ArtifactRefused, "/app in layer"},
		{"a device", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compNone, tarEntry{name: "app/index.json", typ: tar.TypeChar})}
		}, "app/index.json", toolerr.ArtifactRefused, "a character device"},
		{"a hard link", NewOCIConfig(), func() [][2]string {
			return [][2]string{layer(t, compNone, tarEntry{name: "app/a", data: "a"}, tarEntry{name: "app/b", typ: tar.TypeLink, link: "app/a"})}
		}, "app/b", toolerr.ArtifactRefused, "a hard link"},
		{"an oversized entry", small, func() [][2]string {
			return [][2]string{layer(t, compGzip, tarEntry{name: "app/dist/m.wasm", size: 2 << 20})}
		}, "", toolerr.ArtifactRefused, "over the 1048576-byte cap"},
		{"a tar bomb", small, func() [][2]string {
			var es []tarEntry
			for i := range 5 {
				es = append(es, tarEntry{name: "app/f" + string(rune('0'+i)), data: big})
			}
			return [][2]string{layer(t, compGzip, es...)}
		}, "", toolerr.ArtifactRefused, "unpack to more than 4194304 bytes"},
		{"a layer that is not a tar", NewOCIConfig(), func() [][2]string {
			return [][2]string{{"not a tar at all, just text padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding", mediaTypeOCILayerGzip}}
		}, "", toolerr.ArtifactRefused, "not a valid archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := openPack(t, packOCI(t, tc.cfg), writeImage(t, t.TempDir(), tc.layers()...))
			if tc.read != "" && err == nil {
				_, err = fs.ReadFile(p.FS(), tc.read)
			}
			te := toolerr.As(err)
			if te == nil || te.Code != tc.code || !strings.Contains(te.Message, tc.msg) {
				t.Fatalf("got %v, want %s containing %q", err, tc.code, tc.msg)
			}
			t.Logf("%s: %s", te.Code, te.Message)
		})
	}
}

// TestPackImageTamperedLayer: a layer blob whose bytes were changed after
// the manifest was written is artifact-integrity-failed, before any of its
// files is used.
func TestPackImageTamperedLayer(t *testing.T) {
	dir := t.TempDir()
	l := layer(t, compNone, tarEntry{name: "app/index.json", data: `{"v":1}`})
	ref := writeImage(t, dir, l)
	p := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(Digest([]byte(l[0])), "sha256:"))
	b, _ := os.ReadFile(p)
	b[bytes.Index(b, []byte(`"v"`))+1] = 'w'
	os.WriteFile(p, b, 0o644)
	_, err := openPack(t, packOCI(t, NewOCIConfig()), ref)
	if te := toolerr.As(err); te == nil || te.Code != toolerr.ArtifactIntegrityFailed {
		t.Fatalf("got %v, want artifact-integrity-failed", err)
	}
	t.Logf("%v", err)
}

// TestPackImageFileLayers: a file-layer artifact (sandboxd push's config,
// titled layers) is PackFiles; an untitled layer or a title leaving the
// artifact is refused.
func TestPackImageFileLayers(t *testing.T) {
	write := func(titles ...string) string {
		dir := t.TempDir()
		blobs := map[string][]byte{}
		cfg := []byte(`{}`)
		blobs[Digest(cfg)] = cfg
		doc := manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest, ArtifactType: "application/vnd.unknown.artifact.v1",
			Config: &descriptor{MediaType: mediaTypeOCIEmpty, Digest: Digest(cfg), Size: 2}}
		for _, title := range titles {
			b := []byte("content of " + title)
			blobs[Digest(b)] = b
			d := descriptor{MediaType: mediaTypeOCILayer, Digest: Digest(b), Size: int64(len(b))}
			if title != "" {
				d.Annotations = map[string]string{AnnotationTitle: title}
			}
			doc.Layers = append(doc.Layers, d)
		}
		m, _ := json.Marshal(doc)
		if err := writeLayout(dir, "1", blobs, m, mediaTypeOCIManifest); err != nil {
			t.Fatal(err)
		}
		return LayoutPrefix + dir + ":1"
	}
	o := packOCI(t, NewOCIConfig())
	p, err := openPack(t, o, write("index.json", "tools/echo.wasm", "./bundle-map.json"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout != PackFiles || p.Root != "." || strings.Join(p.Files(), " ") != "bundle-map.json index.json tools/echo.wasm" {
		t.Fatalf("layout %s root %s files %v", p.Layout, p.Root, p.Files())
	}
	if b, _ := fs.ReadFile(p.FS(), "tools/echo.wasm"); string(b) != "content of tools/echo.wasm" {
		t.Fatalf("tools/echo.wasm = %q", b)
	}
	// An ORAS directory layer (oras push REF dist/): its entries must lie
	// in the directory its title names.
	dirLayer := func(entries ...tarEntry) string {
		dir := t.TempDir()
		b, mt := tarLayerBytes(t, compGzip, entries...)
		cfg := []byte(`{}`)
		doc := manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest,
			Config: &descriptor{MediaType: mediaTypeOCIEmpty, Digest: Digest(cfg), Size: 2},
			Layers: []descriptor{{MediaType: mt, Digest: Digest(b), Size: int64(len(b)),
				Annotations: map[string]string{AnnotationTitle: "dist", annotationORASUnpack: "true"}}}}
		m, _ := json.Marshal(doc)
		if err := writeLayout(dir, "1", map[string][]byte{Digest(cfg): cfg, Digest(b): b}, m, mediaTypeOCIManifest); err != nil {
			t.Fatal(err)
		}
		return LayoutPrefix + dir + ":1"
	}
	p, err = openPack(t, o, dirLayer(tarEntry{name: "dist/", typ: tar.TypeDir}, tarEntry{name: "dist/tools/a.wasm", data: "a"}))
	if err != nil || strings.Join(p.Files(), " ") != "dist/tools/a.wasm" {
		t.Fatalf("directory layer: %v, files %v", err, p.Files())
	}
	_, err = openPack(t, o, dirLayer(tarEntry{name: "dist/a", data: "a"}, tarEntry{name: "etc/x", data: "x"}))
	if te := toolerr.As(err); te == nil || te.Code != toolerr.ArtifactRefused || !strings.Contains(te.Message, `outside that directory`) {
		t.Fatalf("an entry outside the directory layer: %v", err)
	}
	for titles, msg := range map[string]string{"index.json,": "has no org.opencontainers.image.title", "../x": "leaves its directory", "/etc/x": "absolute path"} {
		_, err := openPack(t, o, write(strings.Split(titles, ",")...))
		if te := toolerr.As(err); te == nil || te.Code != toolerr.ArtifactRefused || !strings.Contains(te.Message, msg) {
			t.Fatalf("%s: got %v, want artifact-refused containing %q", titles, err, msg)
		}
	}
}

func TestSameRepository(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:5000/acme/pack:1", "127.0.0.1:5000/acme/pack@sha256:" + strings.Repeat("a", 64), true},
		{"127.0.0.1:5000/acme/pack:1", "127.0.0.1:5000/acme/other:1", false},
		{"oci-layout:/x/y:1", "oci-layout:/x/y@sha256:" + strings.Repeat("a", 64), true},
		{"oci-layout:/x/y:1", "127.0.0.1:5000/x/y:1", false},
	} {
		if got := SameRepository(c.a, c.b); got != c.want {
			t.Errorf("SameRepository(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// TestPackImageCacheMemo: a pack image opened from a registry leaves its
// files in the cache by the manifest's digest: opened again by digest it
// reads no layer — it boots with the layer gone from the cache and the
// registry down — and a file whose cached copy was tampered with is read
// from the layers again.
func TestPackImageCacheMemo(t *testing.T) {
	srv := registrytest.NewInMemory(t, nil)
	host := registrytest.Host(srv)
	layoutRef := writeImage(t, t.TempDir(), layer(t, compGzip, tarEntry{name: "app/index.json", data: "{}"}, tarEntry{name: "app/dist/m.wasm", data: "module"}))
	cacheDir := filepath.Join(t.TempDir(), "cache")
	o, err := NewOCI(NewOCIConfig().WithCacheDir(cacheDir).WithInsecureRegistries(host))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	art, err := o.Copy(ctx, layoutRef, host+"/acme/pack:1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := openPack(t, o, host+"/acme/pack:1")
	if err != nil {
		t.Fatal(err)
	}
	layerBlob := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(p.Artifact.Layers[0].Digest, "sha256:"))
	moduleBlob := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(Digest([]byte("module")), "sha256:"))
	if _, err := os.Stat(moduleBlob); err != nil {
		t.Fatalf("the module is not a blob of the cache: %v", err)
	}

	// A tampered cached file: the layers are read again.
	os.WriteFile(moduleBlob, []byte("mod-le"), 0o600)
	if p, err = openPack(t, o, art.Ref); err != nil {
		t.Fatal(err)
	}
	if b, _ := fs.ReadFile(p.FS(), "app/dist/m.wasm"); string(b) != "module" {
		t.Fatalf("m.wasm = %q after tampering with its cached copy", b)
	}

	// The layer gone and the registry down: the memo serves.
	if err := os.Remove(layerBlob); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if p, err = openPack(t, o, art.Ref); err != nil {
		t.Fatalf("offline, without the layer: %v", err)
	}
	if b, _ := fs.ReadFile(p.FS(), "app/dist/m.wasm"); string(b) != "module" {
		t.Fatalf("m.wasm = %q from the memo", b)
	}
}
