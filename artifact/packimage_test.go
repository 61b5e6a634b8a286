package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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

// genLayer is a gzip tar layer of n entries named name(0..n-1), each an
// empty regular file ("" skips one), built without holding its entries.
func genLayer(t testing.TB, n int, name func(i int) string) [2]string {
	t.Helper()
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for i := range n {
		nm := name(i)
		if nm == "" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: nm, Mode: 0o644, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return [2]string{z.String(), mediaTypeOCILayerGzip}
}

// loadCosts opens the image of each size's layers, in turn, three times
// (so a change of the machine's load falls on both) and returns, per size,
// the work it took (PackImage.steps), the best time and the files kept.
func loadCosts(t *testing.T, layers ...[][2]string) (steps []int64, took []time.Duration, files []int) {
	t.Helper()
	o := packOCI(t, NewOCIConfig())
	var refs []string
	for _, ls := range layers {
		refs = append(refs, writeImage(t, t.TempDir(), ls...))
	}
	steps, took, files = make([]int64, len(refs)), make([]time.Duration, len(refs)), make([]int, len(refs))
	for round := range 3 {
		for i, ref := range refs {
			start := time.Now()
			p, err := openPack(t, o, ref)
			d := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 || d < took[i] {
				took[i] = d
			}
			steps[i], files[i] = p.steps, len(p.files)
		}
	}
	return steps, took, files
}

// packShapes are images whose cost was files × whiteouts (G03) or could be
// another product: each is built for a size n, with the files it keeps.
var packShapes = []struct {
	name   string
	n      int // the smaller size (the larger is 4n)
	layers func(t testing.TB, n int) [][2]string
	files  func(n int) int
}{
	{"G03: files in /app, whiteouts at the root", 10000, func(t testing.TB, n int) [][2]string {
		return [][2]string{
			genLayer(t, n, func(i int) string { return fmt.Sprintf("app/f/%d", i) }),
			genLayer(t, n, func(i int) string { return fmt.Sprintf(".wh.w%d", i) }),
		}
	}, func(n int) int { return n }},
	{"whiteouts in /app, half of them hitting", 3000, func(t testing.TB, n int) [][2]string {
		return [][2]string{
			genLayer(t, n, func(i int) string { return fmt.Sprintf("app/f/%d", i) }),
			genLayer(t, n, func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf("app/f/.wh.%d", i)
				}
				return fmt.Sprintf("app/f/.wh.x%d", i)
			}),
		}
	}, func(n int) int { return n / 2 }},
	{"opaque markers x files", 2000, func(t testing.TB, n int) [][2]string {
		return [][2]string{
			genLayer(t, n, func(i int) string { return fmt.Sprintf("app/d%d/f", i) }),
			genLayer(t, 2*n, func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf("app/d%d/.wh..wh..opq", i/2)
				}
				return fmt.Sprintf("app/e%d/.wh..wh..opq", i/2) // nothing below: costs the same
			}),
			genLayer(t, n, func(i int) string { return fmt.Sprintf("app/d%d/g", i) }),
		}
	}, func(n int) int { return n }},
	{"a deep tree", 500, func(t testing.TB, n int) [][2]string {
		deep := "app/" + strings.Repeat("d/", 200)
		return [][2]string{
			genLayer(t, n, func(i int) string { return fmt.Sprintf("%s%d", deep, i) }),
			genLayer(t, n, func(i int) string { return fmt.Sprintf("%s.wh.x%d", deep, i) }),
		}
	}, func(n int) int { return n }},
	{"a whiteout of a directory of many files", 2000, func(t testing.TB, n int) [][2]string {
		return [][2]string{
			genLayer(t, n, func(i int) string { return fmt.Sprintf("app/big/%d/f", i) }),
			genLayer(t, n, func(i int) string {
				if i == 0 {
					return "app/.wh.big"
				}
				return fmt.Sprintf("app/new/%d", i)
			}),
		}
	}, func(n int) int { return n - 1 }},
	{"many small layers", 100, func(t testing.TB, n int) [][2]string {
		var ls [][2]string
		for l := range n {
			ls = append(ls, genLayer(t, 20, func(i int) string {
				if i == 0 && l > 1 {
					return fmt.Sprintf("app/l%d/.wh..wh..opq", l-2)
				}
				return fmt.Sprintf("app/l%d/%d", l, i)
			}))
		}
		return ls
	}, func(n int) int { return 2 * 19 }}, // the top two layers': each layer hides the one two below
}

// TestG03PackImageWhiteoutsLinear: applying a pack image's layers costs
// what they hold, not files × whiteouts (G03: 40k files under /app and
// 40k whiteouts at the root took 30 s, SIGTERM unheard): for each shape,
// 4× the entries is about 4× the work (counted in tree steps, at most
// 4.5×) and under 10× the time (quadratic would be 16×), and the files kept
// are the right ones.
func TestG03PackImageWhiteoutsLinear(t *testing.T) {
	for _, sh := range packShapes {
		t.Run(sh.name, func(t *testing.T) {
			steps, took, files := loadCosts(t, sh.layers(t, sh.n), sh.layers(t, 4*sh.n))
			for i, n := range []int{sh.n, 4 * sh.n} {
				if files[i] != sh.files(n) {
					t.Fatalf("n=%d: %d files kept, want %d", n, files[i], sh.files(n))
				}
			}
			sr, tr := float64(steps[1])/float64(steps[0]), float64(took[1])/float64(took[0])
			t.Logf("n=%d: %d steps %s; 4n: %d steps %s; ratio %.2f steps, %.2f time", sh.n, steps[0], took[0], steps[1], took[1], sr, tr)
			if sr > 4.5 {
				t.Errorf("4x the entries took %.2fx the steps, want at most 4.5x", sr)
			}
			if tr > 10 {
				t.Errorf("4x the entries took %.2fx the time, want under 10x", tr)
			}
		})
	}
}

// BenchmarkPackImageWhiteouts: the G03 shape (n files under /app, n
// whiteouts at the root) at n = 40000.
func BenchmarkPackImageWhiteouts(b *testing.B) {
	o, err := NewOCI(NewOCIConfig().WithCacheDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	ls := packShapes[0].layers(b, 40000)
	dir := b.TempDir()
	blobs := map[string][]byte{}
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	doc := manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest, Config: &descriptor{MediaType: mediaTypeOCIConfig, Digest: Digest(cfg), Size: int64(len(cfg))}}
	blobs[Digest(cfg)] = cfg
	for _, l := range ls {
		blobs[Digest([]byte(l[0]))] = []byte(l[0])
		doc.Layers = append(doc.Layers, descriptor{MediaType: l[1], Digest: Digest([]byte(l[0])), Size: int64(len(l[0]))})
	}
	m, _ := json.Marshal(doc)
	if err := writeLayout(dir, "1", blobs, m, mediaTypeOCIManifest); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := o.OpenPackImage(context.Background(), LayoutPrefix+dir+":1"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPackImageWhiteoutSemantics: the OCI image spec's whiteouts, as the
// tree applies them: .wh.NAME hides NAME and all below it in lower layers
// only, .wh..wh..opq hides a directory's lower contents only, entries of
// the whiteout's own layer survive in either order, and a name is not a
// prefix (.wh.di does not touch dist).
func TestPackImageWhiteoutSemantics(t *testing.T) {
	f := func(name string) tarEntry { return tarEntry{name: name, data: name} }
	base := layer(t, compGzip, f("app/index.json"), f("app/dist/a.wasm"), f("app/dist/sub/b.wasm"), f("app/di"), f("app/old/x"), f("app/old/deep/y"), f("etc/conf"))
	for _, tc := range []struct {
		name   string
		layers [][2]string
		want   string
	}{
		{"nothing", nil, "app/di app/dist/a.wasm app/dist/sub/b.wasm app/index.json app/old/deep/y app/old/x"},
		{"a file whiteout", [][2]string{layer(t, compNone, f("app/dist/.wh.a.wasm"))},
			"app/di app/dist/sub/b.wasm app/index.json app/old/deep/y app/old/x"},
		{"a directory whiteout takes its subtree, not a name it prefixes", [][2]string{layer(t, compNone, f("app/.wh.di"), f("app/.wh.old"))},
			"app/dist/a.wasm app/dist/sub/b.wasm app/index.json"},
		{"the whiteout's own layer survives, in either order", [][2]string{layer(t, compNone, f("app/old/z"), f("app/.wh.old"), f("app/dist/.wh.sub"), f("app/dist/sub/c.wasm"))},
			"app/di app/dist/a.wasm app/dist/sub/c.wasm app/index.json app/old/z"},
		{"an opaque directory keeps its own layer's entries and its siblings", [][2]string{layer(t, compNone, f("app/dist/n.wasm"), f("app/dist/.wh..wh..opq"))},
			"app/di app/dist/n.wasm app/index.json app/old/deep/y app/old/x"},
		{"an opaque root", [][2]string{layer(t, compNone, f(".wh..wh..opq"), f("app/index.json"))}, "app/index.json"},
		{"a whiteout of /app", [][2]string{layer(t, compNone, f(".wh.app"), f("app/new"))}, "app/new"},
		{"whiteouts outside /app", [][2]string{layer(t, compNone, f(".wh.etc"), f(".wh.di"), f("etc/.wh..wh..opq"), f("dist/.wh.a.wasm"))},
			"app/di app/dist/a.wasm app/dist/sub/b.wasm app/index.json app/old/deep/y app/old/x"},
		{"a higher layer's whiteout takes a middle layer's file", [][2]string{layer(t, compNone, f("app/m")), layer(t, compNone, f("app/.wh.m"))},
			"app/di app/dist/a.wasm app/dist/sub/b.wasm app/index.json app/old/deep/y app/old/x"},
		{"a file replaces a lower directory and all below it", [][2]string{layer(t, compNone, f("app/old"))},
			"app/di app/dist/a.wasm app/dist/sub/b.wasm app/index.json app/old"},
		{"a directory replaces a lower file, not what is below a lower directory", [][2]string{layer(t, compNone, tarEntry{name: "app/di/", typ: tar.TypeDir}, tarEntry{name: "app/old/", typ: tar.TypeDir})},
			"app/dist/a.wasm app/dist/sub/b.wasm app/index.json app/old/deep/y app/old/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := openPack(t, packOCI(t, NewOCIConfig()), writeImage(t, t.TempDir(), append([][2]string{base}, tc.layers...)...))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.Files(), " "); got != tc.want {
				t.Fatalf("files\n %s\nwant\n %s", got, tc.want)
			}
			for _, name := range p.Files() {
				if b, err := fs.ReadFile(p.FS(), name); err != nil || string(b) != name {
					t.Fatalf("%s = %q, %v", name, b, err)
				}
			}
		})
	}
	// One layer holding a file and a file below it: what is below a file
	// does not exist.
	p, err := openPack(t, packOCI(t, NewOCIConfig()), writeImage(t, t.TempDir(), layer(t, compNone, f("app/x"), f("app/x/y"))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadFile(p.FS(), "app/x/y"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("app/x/y below the file app/x: %v, want fs.ErrNotExist", err)
	}
}

// stageCtx is a context that is cancelled at the k-th check made from a
// function whose name contains stage (a stage of the loader), and records
// when.
type stageCtx struct {
	context.Context
	stage string
	k     int
	mu    sync.Mutex
	seen  int
	at    time.Time
	done  chan struct{}
}

func newStageCtx(stage string, k int) *stageCtx {
	return &stageCtx{Context: context.Background(), stage: stage, k: k, done: make(chan struct{})}
}

func (c *stageCtx) Done() <-chan struct{} { return c.done }

func (c *stageCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() {
		return context.Canceled
	}
	pc, _, _, _ := runtime.Caller(1)
	if fn := runtime.FuncForPC(pc); fn != nil && strings.Contains(fn.Name(), c.stage) {
		if c.seen++; c.seen >= c.k {
			c.at = time.Now()
			close(c.done)
			return context.Canceled
		}
	}
	return nil
}

func (c *stageCtx) cancelledAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// TestPackImageCancelMidApply: a stop is seen at every stage of reading a
// pack image — the unpacked stream, the tar walk, applying the whiteouts,
// listing the files — and the loader returns within 1 s of it, cancelled.
func TestPackImageCancelMidApply(t *testing.T) {
	n := 40000
	ref := writeImage(t, t.TempDir(),
		genLayer(t, n, func(i int) string { return fmt.Sprintf("app/f/%d", i) }),
		genLayer(t, n, func(i int) string { return fmt.Sprintf("app/f/.wh.%d", i+i%2) }))
	o := packOCI(t, NewOCIConfig())
	for _, stage := range []string{"(*layerReader).Read", "(*OCI).applyLayer", "(*packTree).check", "(*packTree).files"} {
		t.Run(stage, func(t *testing.T) {
			ctx := newStageCtx(stage, 3)
			_, err := o.OpenPackImage(ctx, ref)
			at := ctx.cancelledAt()
			if at.IsZero() {
				t.Fatalf("the loader never checked the context in %s (err %v)", stage, err)
			}
			after := time.Since(at)
			if te := toolerr.As(err); te == nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want the cancellation", err)
			}
			t.Logf("returned %s after the stop in %s: %v", after, stage, err)
			if after > time.Second {
				t.Fatalf("returned %s after the stop, want within 1s", after)
			}
		})
	}
	t.Run("by the clock", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(20*time.Millisecond, cancel)
		defer stop.Stop()
		start := time.Now()
		_, err := o.OpenPackImage(ctx, ref)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v after %s, want the cancellation", err, time.Since(start))
		}
		if d := time.Since(start); d > time.Second+20*time.Millisecond {
			t.Fatalf("returned %s after the start, %s after the stop", d, d-20*time.Millisecond)
		}
	})
}

// zeroLayer is a layer of one file name of size zero bytes, compressed
// with comp, written as it is compressed.
func zeroLayer(t *testing.T, comp, name string, size int64) [2]string {
	t.Helper()
	var z bytes.Buffer
	var w io.WriteCloser
	mt := mediaTypeOCILayerGzip
	switch comp {
	case compGzip:
		w, _ = gzip.NewWriterLevel(&z, gzip.BestCompression)
	case compZstd:
		w, _ = zstd.NewWriter(&z, zstd.WithEncoderLevel(zstd.SpeedFastest))
		mt = mediaTypeOCILayerZstd
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: size, ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	w.Close()
	return [2]string{z.String(), mt}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestPackImageBombs: a layer that unpacks to more than 256 times its size
// (beyond 64 MiB) is refused naming the decompression-ratio cap, after
// unpacking no more than that, gzip or zstd, in /app or not; one under the
// floor reads; an entry name over 4096 bytes is refused naming its cap.
func TestPackImageBombs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		layer func() [2]string
		msg   string
	}{
		{"gzip, outside /app", func() [2]string { return zeroLayer(t, compGzip, "var/zero", 80<<20) }, "(the decompression-ratio cap)"},
		{"zstd, in /app", func() [2]string { return zeroLayer(t, compZstd, "app/zero", 200<<20) }, "(the decompression-ratio cap)"},
		{"zstd, under the floor", func() [2]string { return zeroLayer(t, compZstd, "var/zero", 48<<20) }, ""},
		{"a long name", func() [2]string {
			return layer(t, compGzip, tarEntry{name: "app/" + strings.Repeat("d/", 2100) + "f", data: "x"})
		}, "over the 4096-byte cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.layer()
			start := time.Now()
			_, err := openPack(t, packOCI(t, NewOCIConfig()), writeImage(t, t.TempDir(), l))
			t.Logf("%d-byte layer: %v after %s", len(l[0]), err, time.Since(start))
			if tc.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if te := toolerr.As(err); te == nil || te.Code != toolerr.ArtifactRefused || !strings.Contains(te.Message, tc.msg) {
				t.Fatalf("got %v, want artifact-refused containing %q", err, tc.msg)
			}
		})
	}
}

// TestPackImageWithContext: the files of a PackImage WithContext fail
// with the context's error once it is done — Open, ReadFile, Stat and a
// Read of a file already open — and the image itself reads on.
func TestPackImageWithContext(t *testing.T) {
	big := strings.Repeat("m", 3<<20)
	p, err := openPack(t, packOCI(t, NewOCIConfig()), writeImage(t, t.TempDir(), layer(t, compGzip, tarEntry{name: "app/index.json", data: "{}"}, tarEntry{name: "app/m.wasm", data: big})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := p.WithContext(ctx)
	f, err := q.FS().Open("app/m.wasm")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	if n, err := f.Read(buf); err != nil || n != packReadChunk {
		t.Fatalf("read %d, %v; want one %d-byte chunk", n, err, packReadChunk)
	}
	cancel()
	if _, err := f.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after the stop: %v", err)
	}
	for op, err := range map[string]error{
		"open":     func() error { _, err := q.FS().Open("app/index.json"); return err }(),
		"readFile": func() error { _, err := fs.ReadFile(q.FS(), "app/index.json"); return err }(),
		"stat":     func() error { _, err := fs.Stat(q.FS(), "app/index.json"); return err }(),
	} {
		if te := toolerr.As(err); !errors.Is(err, context.Canceled) || te == nil || te.Code != toolerr.Cancelled {
			t.Fatalf("%s after the stop: %v, want cancelled", op, err)
		}
	}
	if b, err := fs.ReadFile(p.FS(), "app/m.wasm"); err != nil || len(b) != len(big) {
		t.Fatalf("the image itself: %d bytes, %v", len(b), err)
	}
}
