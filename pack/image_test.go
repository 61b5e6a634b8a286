package pack_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

// imageOf writes an OCI layout holding a container image with one tar
// layer of files (name → content) and opens it as a pack image.
func imageOf(t *testing.T, files map[string]string) *artifact.PackImage {
	t.Helper()
	dir := t.TempDir()
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		_ = os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", h), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h, len(b)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(data)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write([]byte(data))
	}
	tw.Close()
	ld, ls := put(buf.Bytes())
	cd, cs := put([]byte(`{"architecture":"amd64","os":"linux"}`))
	m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ls}}})
	md, ms := put(m)
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}}})
	_ = os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	img, err := o.OpenPackImage(context.Background(), artifact.LayoutPrefix+dir)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func imageIndex(modulePath, sandbox string) string {
	tool := map[string]any{"id": "acme.identity", "input": map[string]any{"type": "object"}, "output": map[string]any{"type": "object"},
		"limits": map[string]any{"memMB": 16, "cpuMs": 500}, "modulePath": modulePath}
	if sandbox != "" {
		tool["sandbox"] = sandbox
	}
	b, _ := json.Marshal(map[string]any{"v": 1, "packId": "acme", "packVersion": "1.0.0", "artifactVersion": "1",
		"publishedAt": "2026-12-01T00:00:00.000Z", "tools": []any{tool}, "guardrails": []any{}, "agents": []any{}, "flows": []any{}})
	return string(b)
}

const wasmHeader = "\x00asm\x01\x00\x00\x00"

// TestImageSourceRules: the module root and bundle map defaults, the
// paths given for the image (relative from /app, absolute from the
// root), and what is refused.
func TestImageSourceRules(t *testing.T) {
	kindgi := map[string]string{
		"app/index.json":                     imageIndex("tools/identity/index.ts", ""),
		"app/dist/bundle-map.json":           `{"tools/identity/index.ts":"tools/identity/index.mjs"}`,
		"app/dist/tools/identity/index.wasm": wasmHeader + "dist",
		"app/tools/identity/index.wasm":      wasmHeader + "app",
	}
	flat := map[string]string{
		"app/index.json":          imageIndex("tools/identity.wasm", ""),
		"app/tools/identity.wasm": wasmHeader + "app",
		"app/dist/other.wasm":     wasmHeader + "other",
	}
	for _, c := range []struct {
		name                 string
		files                map[string]string
		moduleRoot, bm, want string // want: the module's bytes after the header, or a problem
	}{
		{"Kindgi's shape: dist/ and its bundle map", kindgi, "", "", "dist"},
		{"dist/ lacks the module: the pack directory", flat, "", "", "app"},
		{"--module-root relative to /app", kindgi, "dist", "", "dist"},
		{"--module-root absolute", kindgi, "/app/dist", "", "dist"},
		{"--module-root the pack directory, no bundle map there", kindgi, ".", "", "app"},
		{"--bundle-map inside the image", kindgi, ".", "/app/dist/bundle-map.json", "app"},
		{"--module-root leaving the image", kindgi, "../..", "", "leaves the image"},
		{"a missing --bundle-map", kindgi, "", "nope.json", "bundle map: file does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, problems := pack.ImageSource{Image: imageOf(t, c.files), Ref: "r/acme/pack@sha256:x", Pinned: true, ModuleRoot: c.moduleRoot, BundleMap: c.bm}.Read()
			if len(problems) > 0 || p == nil {
				if len(problems) == 0 || !strings.Contains(problems[0].Message, c.want) {
					t.Fatalf("problems %v, want %q", problems, c.want)
				}
				return
			}
			if got := strings.TrimPrefix(string(p.Tools[0].Module), wasmHeader); got != c.want {
				t.Fatalf("module %q (%s), want %q", got, p.Tools[0].ModuleFile, c.want)
			}
		})
	}
}

// TestImageSourceStrictNeedsDigest: a strict tool of an image named by tag
// is refused (artifact-refused), the same image by digest is not.
func TestImageSourceStrictNeedsDigest(t *testing.T) {
	img := imageOf(t, map[string]string{"app/index.json": imageIndex("m.wasm", "strict"), "app/m.wasm": wasmHeader})
	p, problems := pack.ImageSource{Image: img, Ref: "reg.example/acme/pack:1"}.Read()
	if len(problems) != 1 || problems[0].Code != toolerr.ArtifactRefused || len(p.Tools) != 0 ||
		!strings.Contains(problems[0].Message, "pinned by digest (oci://reg.example/acme/pack@sha256:…)") {
		t.Fatalf("by tag: tools %d, problems %v", len(p.Tools), problems)
	}
	t.Log(problems[0].Message)
	p, problems = pack.ImageSource{Image: img, Ref: "reg.example/acme/pack@" + img.Artifact.Digest, Pinned: true}.Read()
	if len(problems) != 0 || len(p.Tools) != 1 {
		t.Fatalf("by digest: tools %d, problems %v", len(p.Tools), problems)
	}
}
