package main

import (
	"archive/tar"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// staticBinary builds a tiny static Go program (CGO_ENABLED=0), as make
// image builds sandboxd.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandboxd")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func testOptions(t *testing.T, bin, out string) options {
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return options{binary: bin, caBundle: ca, version: "v9.9.9", revision: "0123abcd", source: "https://example.invalid/sandboxd",
		created: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), arch: "amd64", out: out, keychain: authn.DefaultKeychain}
}

// The same inputs give the same digest; the layout holds that image; its
// config runs a non-root user, documents port and env; its only layer has
// the binary, the CA bundle and a 0700 cache directory, and no shell.
func TestImageReproducibleAndLocked(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a binary")
	}
	bin := staticBinary(t)
	out1, out2 := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	d1, err := build(testOptions(t, bin, out1))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := build(testOptions(t, bin, out2))
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("two builds of the same inputs: %s and %s", d1, d2)
	}
	t.Logf("image digest %s", d1)

	p, err := layout.FromPath(out1)
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Image(d1)
	if err != nil {
		t.Fatalf("layout %s lacks image %s: %v", out1, d1, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/sandboxd" || cf.OS != "linux" {
		t.Errorf("config user %q entrypoint %q os %q", c.User, c.Entrypoint, cf.OS)
	}
	if _, ok := c.ExposedPorts["8787/tcp"]; !ok {
		t.Errorf("exposed ports %v", c.ExposedPorts)
	}
	env := strings.Join(c.Env, " ")
	for _, want := range []string{"PORT=8787", "XDG_CACHE_HOME=/var/cache/sandboxd", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	if c.Labels["org.opencontainers.image.version"] != "v9.9.9" || c.Labels["org.opencontainers.image.revision"] != "0123abcd" {
		t.Errorf("labels %v", c.Labels)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[strings.TrimSuffix(h.Name, "/")] = h
	}
	if h := entries["sandboxd"]; h == nil || h.Mode != 0o555 || h.Uid != 0 {
		t.Errorf("binary entry %+v", h)
	}
	if h := entries["var/cache/sandboxd"]; h == nil || h.Mode != 0o700 || h.Uid != 65532 {
		t.Errorf("cache dir entry %+v", h)
	}
	if entries["etc/ssl/certs/ca-certificates.crt"] == nil {
		t.Error("no CA bundle")
	}
	for n := range entries {
		if strings.HasPrefix(n, "bin") || strings.HasSuffix(n, "/sh") {
			t.Errorf("the image has %s", n)
		}
	}
}

// A dynamically linked binary is refused (the image has no loader).
func TestImageRefusesDynamicBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if checkStatic(mustRead(t, "/bin/sh")) == nil && checkStatic(mustRead(t, self)) == nil {
		t.Skip("no dynamically linked binary to try")
	}
	o := testOptions(t, "/bin/sh", filepath.Join(t.TempDir(), "x"))
	if _, err := build(o); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("build of /bin/sh: %v, want a dynamic-link refusal", err)
	}
}

// --push writes the same image to a registry (an in-process registry on
// loopback).
func TestImagePush(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a binary")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	o := testOptions(t, staticBinary(t), filepath.Join(t.TempDir(), "layout"))
	o.push, o.insecure = u.Host+"/sandboxd:v9.9.9", true
	d, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(o.push, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != d {
		t.Fatalf("registry has %s, layout %s", desc.Digest, d)
	}
	var _ v1.Hash = d
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	return b
}
