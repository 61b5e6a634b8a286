// Command image builds sandboxd's container image without a container
// daemon: one layer holding a static sandboxd binary (and the build host's
// CA bundle, for registries over TLS) on an empty base, run as a non-root
// user, with no shell. It writes an OCI image layout directory and, with
// --push, pushes the same image to a registry. The same inputs give the same
// digest: every timestamp is --created, every owner is root, the layer is an
// uncompressed-then-gzipped tar in a fixed order.
//
//	go run ./deploy/image --binary bin/linux-amd64/sandboxd --version v1.2.3 \
//	    --revision "$(git rev-parse HEAD)" --created "$(git log -1 --format=%cI)" \
//	    --out bin/image [--push registry.example.com/sandboxd:v1.2.3]
//
// make image runs it (see docs/operations.md).
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts, documented in its config and in docs/operations.md.
const (
	binaryPath = "/sandboxd"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	cacheRoot  = "/var/cache/sandboxd" // XDG_CACHE_HOME: compilation and artifact caches (mount an emptyDir)
	userID     = 65532                 // the distroless "nonroot" uid/gid
	port       = "8787"
)

// options are the inputs of one build.
type options struct {
	binary, caBundle       string
	version, revision      string
	source                 string
	created                time.Time
	arch                   string
	insecure               bool // push over plain HTTP (loopback registries in tests)
	out, push              string
	keychain               authn.Keychain
	remoteOpts             []remote.Option
	allowDynamicForTesting bool
}

func main() {
	var o options
	var created string
	flag.StringVar(&o.binary, "binary", "", "the static linux sandboxd binary (required)")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates to put at "+caPath+" (empty: none)")
	flag.StringVar(&o.version, "version", "dev", "org.opencontainers.image.version")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	flag.StringVar(&o.source, "source", "https://github.com/sandboxd/sandboxd", "org.opencontainers.image.source")
	flag.StringVar(&created, "created", "1970-01-01T00:00:00Z", "RFC 3339 time for the config and every file (the commit's time, for reproducibility)")
	flag.StringVar(&o.arch, "arch", "amd64", "GOARCH of the binary")
	flag.StringVar(&o.out, "out", "bin/image", "OCI image layout directory to write (replaced)")
	flag.StringVar(&o.push, "push", "", "also push the image to this reference (credentials: the Docker config keychain)")
	flag.BoolVar(&o.insecure, "insecure", false, "push over plain HTTP")
	flag.Parse()
	t, err := time.Parse(time.RFC3339, created)
	if err != nil || flag.NArg() > 0 || o.binary == "" {
		fmt.Fprintln(os.Stderr, "usage: image --binary FILE [--version V --revision SHA --created RFC3339 --out DIR --push REF]")
		os.Exit(2)
	}
	o.created = t
	o.keychain = authn.DefaultKeychain
	digest, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

// build writes the layout (and pushes) and returns the image digest.
func build(o options) (v1.Hash, error) {
	img, err := newImage(o)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	ann := map[string]string{"org.opencontainers.image.ref.name": o.version}
	if err := p.AppendImage(img, layout.WithAnnotations(ann)); err != nil {
		return v1.Hash{}, err
	}
	if o.push != "" {
		var nopts []name.Option
		if o.insecure {
			nopts = append(nopts, name.Insecure)
		}
		ref, err := name.ParseReference(o.push, nopts...)
		if err != nil {
			return v1.Hash{}, err
		}
		ropts := append([]remote.Option{remote.WithAuthFromKeychain(o.keychain)}, o.remoteOpts...)
		if err := remote.Write(ref, img, ropts...); err != nil {
			return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return digest, nil
}

// newImage assembles the image: an empty base, one layer, the config.
func newImage(o options) (v1.Image, error) {
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin); err != nil && !o.allowDynamicForTesting {
		return nil, fmt.Errorf("%s: %w (build it with CGO_ENABLED=0)", o.binary, err)
	}
	var ca []byte
	if o.caBundle != "" {
		if ca, err = os.ReadFile(o.caBundle); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
	}
	layerTar, err := rootfs(bin, ca, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "deploy/image: sandboxd " + o.version, Comment: "static sandboxd binary, CA bundle, cache directory",
	}})
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "sandboxd",
		"org.opencontainers.image.description": "Runs WebAssembly tool handlers in a sandbox; sandboxd serve is a Kindgi pack service. Port 8787 (PORT); token in KINDGI_PACK_SERVICE_TOKEN; caches under " + cacheRoot + ".",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     o.created.UTC().Format(time.RFC3339),
	}
	cfg := v1.Config{
		User:         fmt.Sprintf("%d:%d", userID, userID),
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"serve", "--host", "0.0.0.0"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{port + "/tcp": {}},
		Env: []string{
			"PORT=" + port,
			"XDG_CACHE_HOME=" + cacheRoot,
			"HOME=" + cacheRoot,
			"SSL_CERT_FILE=" + caPath,
		},
		Labels: labels,
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.created}
	cf.Architecture, cf.OS = o.arch, "linux"
	cf.Author = "sandboxd"
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer: the binary, the CA bundle and the cache directory
// (owned by the image's user, mode 0700, which sandboxd requires of cache
// directories), every entry stamped with created. No shell, no package
// manager, no /etc/passwd: the user is numeric.
func rootfs(bin, ca []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(p string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: created, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(b)), ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	steps := []func() error{
		func() error { return file(strings.TrimPrefix(binaryPath, "/"), 0o555, bin) },
		func() error { return dir("etc", 0o755, 0) },
		func() error { return dir("etc/ssl", 0o755, 0) },
		func() error { return dir("etc/ssl/certs", 0o755, 0) },
	}
	if ca != nil {
		steps = append(steps, func() error { return file(strings.TrimPrefix(caPath, "/"), 0o444, ca) })
	}
	steps = append(steps,
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/cache", 0o755, 0) },
		func() error { return dir(strings.TrimPrefix(cacheRoot, "/"), 0o700, userID) },
	)
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic refuses a binary that needs a dynamic loader (the image has
// none).
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (has an ELF interpreter)")
		}
	}
	return nil
}
