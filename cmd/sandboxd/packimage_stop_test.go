package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// packLayout is an OCI image layout written by the test: blobs by digest
// and one tag, re-pointed with tag.
type packLayout struct {
	t   *testing.T
	dir string
}

func (l *packLayout) blob(b []byte) string {
	l.t.Helper()
	sum := sha256.Sum256(b)
	p := filepath.Join(l.dir, "blobs", "sha256", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(sum[:])
}

// image writes an image (an image config, so a tar pack image) of gzip
// tar layers and points tag at it.
func (l *packLayout) image(tag string, layers ...[]byte) {
	l.t.Helper()
	desc := func(mt string, b []byte) map[string]any {
		return map[string]any{"mediaType": mt, "digest": l.blob(b), "size": len(b)}
	}
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	var ls []any
	for _, b := range layers {
		ls = append(ls, desc("application/vnd.oci.image.layer.v1.tar+gzip", b))
	}
	m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", cfg), "layers": ls})
	md := desc("application/vnd.oci.image.manifest.v1+json", m)
	md["annotations"] = map[string]string{"org.opencontainers.image.ref.name": tag}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	if err := os.WriteFile(filepath.Join(l.dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "index.json"), idx, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// gzipTar is a gzip tar of n empty files named name(0..n-1) and of files
// (name → content).
func gzipTar(t *testing.T, n int, name func(int) string, files [][2]string) []byte {
	t.Helper()
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(f[1])), ModTime: time.Unix(0, 0)})
		tw.Write([]byte(f[1]))
	}
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: name(i), Mode: 0o644, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return z.Bytes()
}

// TestServePackImageStopDuringLoad: SIGTERM while `serve --index
// oci://oci-layout:…` reads a big pack image (G03's shape: 250k files
// under /app, 250k whiteouts at the root; seconds of tar walk however
// linear) exits 0 within about a second, stopped during boot; and SIGTERM
// during a SIGHUP reload of a tag re-pointed at that image does too.
func TestServePackImageStopDuringLoad(t *testing.T) {
	sandboxdBinary(t)
	n := 250000
	big := [][]byte{
		gzipTar(t, n, func(i int) string { return fmt.Sprintf("app/f/%d", i) }, nil),
		gzipTar(t, n, func(i int) string { return fmt.Sprintf(".wh.w%d", i) }, nil),
	}
	stop := func(t *testing.T, p *servedProcess, during string) {
		t.Helper()
		time.Sleep(500 * time.Millisecond) // well into the layers
		start := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code := p.wait(30 * time.Second)
		took := time.Since(start)
		t.Logf("exit %d %s after SIGTERM during %s", code, took.Round(time.Millisecond), during)
		if code != 0 || strings.Contains(p.output(), `"boot-failed"`) || strings.Contains(p.output(), `"listening"`) && during == "boot" {
			t.Fatalf("exit %d, want 0 while still loading:\n%s", code, p.output())
		}
		if took > 2*time.Second {
			t.Fatalf("exit %s after SIGTERM, want about 1s", took)
		}
	}

	t.Run("boot", func(t *testing.T) {
		l := &packLayout{t: t, dir: t.TempDir()}
		l.image("1", big...)
		p := startServe(t, "--index", "oci://oci-layout:"+l.dir+":1", "--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t))
		p.waitEvent("artifact-resolve", nil)
		stop(t, p, "boot")
		if !strings.Contains(p.output(), `"during":"boot"`) {
			t.Fatalf("no stopped during boot:\n%s", p.output())
		}
	})

	t.Run("reload", func(t *testing.T) {
		l := &packLayout{t: t, dir: t.TempDir()}
		l.image("1", gzipTar(t, 0, nil, kindgiEntries(t, "20261201.1")))
		p := startServe(t, "--index", "oci://oci-layout:"+l.dir+":1", "--artifact-cache-dir", filepath.Join(t.TempDir(), "oci"), "--cache-dir", sandboxtest.CacheDir(t))
		p.waitEvent("listening", nil)
		l.image("1", big...)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		p.waitEvent("artifact-resolve", nil) // the reload's
		stop(t, p, "reload")
		if strings.Contains(p.output(), `"reloaded"`) || strings.Contains(p.output(), `"reload-failed"`) {
			t.Fatalf("the reload finished before SIGTERM:\n%s", p.output())
		}
	})
}
