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
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Caps and defaults of the OCI resolver.
const (
	// MaxManifestSize caps manifests, indexes and configs: a larger one is
	// refused (artifact-refused) before its body is read.
	MaxManifestSize = 4 << 20
	// DefaultTagTTL is how long a tag's digest is trusted before it is
	// re-resolved with a HEAD request.
	DefaultTagTTL = 30 * time.Second
	// maxUnpacked caps the bytes of a tar layer scanned for a module.
	maxUnpacked = 4 << 30
)

// OCIConfig holds an OCI resolver's long-lived settings. It is immutable:
// every With method returns a changed copy. Start from NewOCIConfig;
// NewOCI validates it.
type OCIConfig struct {
	cacheDir string
	insecure []string
	keychain authn.Keychain
	tagTTL   time.Duration
	maxBlob  int64
}

// NewOCIConfig returns the defaults: the cache in DefaultOCICacheDir,
// credentials from the docker config keychain (~/.docker/config.json and
// its credential helpers; anonymous when it has none), TLS to every
// registry, DefaultTagTTL, and blobs capped at DefaultMaxModuleSize.
func NewOCIConfig() OCIConfig {
	return OCIConfig{keychain: authn.DefaultKeychain, tagTTL: DefaultTagTTL, maxBlob: DefaultMaxModuleSize}
}

// DefaultOCICacheDir is sandboxd/oci under the user cache directory.
func DefaultOCICacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "sandboxd", "oci"), nil
}

// WithCacheDir sets the content-addressed artifact cache directory. It is
// created mode 0700 on first use; one writable by other users, or owned by
// another user, is refused (artifact-refused). Several processes may share it.
func (c OCIConfig) WithCacheDir(dir string) OCIConfig {
	c.cacheDir = dir
	return c
}

// WithInsecureRegistries allows plain HTTP to these registries (host:port).
// Only loopback hosts are accepted.
func (c OCIConfig) WithInsecureRegistries(hosts ...string) OCIConfig {
	c.insecure = append([]string(nil), hosts...)
	return c
}

// WithKeychain sets where registry credentials come from (authn.DefaultKeychain
// by default; authn.NewMultiKeychain combines several).
func (c OCIConfig) WithKeychain(k authn.Keychain) OCIConfig {
	c.keychain = k
	return c
}

// WithTagTTL sets how long a tag's digest is reused before a HEAD request
// re-resolves it. 0 re-resolves on every call.
func (c OCIConfig) WithTagTTL(d time.Duration) OCIConfig {
	c.tagTTL = d
	return c
}

// WithMaxBlobSize caps every layer and module; a descriptor announcing more
// is refused (artifact-refused) before anything is downloaded.
func (c OCIConfig) WithMaxBlobSize(n int64) OCIConfig {
	c.maxBlob = n
	return c
}

// OCI resolves oci refs, from registries and from OCI image layout
// directories ("oci-layout:" imageRefs), through a content-addressed disk
// cache. It also pulls, inspects and pushes artifacts. It keeps one
// authenticated client per registry for its lifetime. An OCI is safe for
// concurrent use; call Close when done.
type OCI struct {
	cfg           OCIConfig
	insecure      map[string]bool
	base          *http.Transport
	pullTransport http.RoundTripper

	cacheMu  sync.Mutex
	cache    *cache
	flight   flight
	mu       sync.Mutex
	regs     map[string]*registryClient
	tags     map[string]tagEntry
	pushOnce sync.Once
	push     *remote.Pusher
	pushErr  error
}

// NewOCI validates cfg and returns a resolver. It does no I/O: the cache
// directory is prepared, and registries are contacted, on first use.
func NewOCI(cfg OCIConfig) (*OCI, error) {
	if cfg.keychain == nil {
		cfg.keychain = authn.NewMultiKeychain()
	}
	if cfg.tagTTL < 0 {
		return nil, fmt.Errorf("artifact: negative tag TTL %s", cfg.tagTTL)
	}
	if cfg.maxBlob <= 0 {
		return nil, fmt.Errorf("artifact: blob size cap must be positive, got %d", cfg.maxBlob)
	}
	ins := map[string]bool{}
	for _, h := range cfg.insecure {
		if err := checkInsecureHost(h); err != nil {
			return nil, fmt.Errorf("artifact: %w", err)
		}
		ins[h] = true
	}
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	o := &OCI{
		cfg:      cfg,
		insecure: ins,
		base:     base,
		regs:     map[string]*registryClient{},
		tags:     map[string]tagEntry{},
	}
	o.pullTransport = &retryTransport{inner: &schemeGuard{inner: base, insecure: ins}}
	o.flight.m = map[string]*flightCall{}
	return o, nil
}

// Close releases idle connections. Calls in flight are not interrupted.
func (o *OCI) Close() error {
	o.base.CloseIdleConnections()
	return nil
}

func (o *OCI) openCache() (*cache, error) {
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	if o.cache != nil {
		return o.cache, nil
	}
	dir := o.cfg.cacheDir
	if dir == "" {
		d, err := DefaultOCICacheDir()
		if err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "no artifact cache directory (set one with --artifact-cache-dir)")
		}
		dir = d
	}
	c, err := openCache(dir)
	if err != nil {
		return nil, err
	}
	o.cache = c
	return c, nil
}

// source is where manifests and blobs come from: a registry (through the
// cache) or a layout directory.
type source interface {
	// resolveTag returns the digest and size of the manifest tag names.
	resolveTag(ctx context.Context, tag string) (digest string, size int64, err error)
	// manifest returns the verified bytes of manifest d (size < 0: unknown).
	manifest(ctx context.Context, d string, size int64) ([]byte, error)
	// blob opens blob d of size bytes as a reader that verifies its digest;
	// its bytes are trustworthy only once it returned io.EOF.
	blob(ctx context.Context, d string, size int64, progress func(int64)) (io.ReadCloser, error)
}

func (o *OCI) source(r *imageRef) (source, error) {
	if r.layout != "" {
		return &layoutSource{dir: r.layout}, nil
	}
	c, err := o.openCache()
	if err != nil {
		return nil, err
	}
	return &remoteSource{o: o, ref: r, cache: c}, nil
}

type descriptor struct {
	MediaType    string            `json:"mediaType"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Platform     *platform         `json:"platform,omitempty"`
	ArtifactType string            `json:"artifactType,omitempty"`
	URLs         []string          `json:"urls,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifestDoc struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType,omitempty"`
	ArtifactType  string            `json:"artifactType,omitempty"`
	Config        *descriptor       `json:"config,omitempty"`
	Layers        []descriptor      `json:"layers,omitempty"`
	Manifests     []descriptor      `json:"manifests,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Layouts of an artifact.
const (
	LayoutWasm  = "wasm"  // the CNCF Wasm OCI artifact: each module is a layer
	LayoutImage = "image" // an ordinary image: modules are files in tar layers
)

// Artifact describes one resolved OCI artifact (an image manifest).
type Artifact struct {
	// Ref is the digest-pinned reference: "registry/repo@sha256:…" or
	// "oci-layout:dir@sha256:…".
	Ref string `json:"ref"`
	// Digest is the image manifest's digest.
	Digest string `json:"digest"`
	// MediaType is the image manifest's media type.
	MediaType string `json:"mediaType"`
	// ArtifactType is the manifest's artifactType, when it has one.
	ArtifactType string `json:"artifactType,omitempty"`
	// ConfigMediaType is the config descriptor's media type.
	ConfigMediaType string `json:"configMediaType"`
	// Layout is LayoutWasm or LayoutImage.
	Layout string `json:"layout"`
	// Version is the org.opencontainers.image.version annotation ("" if absent).
	Version string `json:"version,omitempty"`
	// Size is the manifest, config and layer bytes together.
	Size int64 `json:"size"`
	// Index is the digest of the image index the manifest was chosen from.
	Index string `json:"index,omitempty"`
	// Layers lists the layers in order.
	Layers []Layer `json:"layers"`
}

// Layer is one layer of an Artifact.
type Layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	// Title is the org.opencontainers.image.title annotation: for a Wasm
	// layer, the modulePath it provides.
	Title string `json:"title,omitempty"`
}

// Modules lists the modulePaths of a Wasm-layout artifact's module layers.
func (a *Artifact) Modules() []string {
	var out []string
	for _, l := range a.Layers {
		if isWasmLayer(l.MediaType) && l.Title != "" {
			out = append(out, l.Title)
		}
	}
	return out
}

// opened is an artifact whose manifest has been fetched and checked.
type opened struct {
	src source
	ref *imageRef
	raw []byte
	doc manifestDoc
	art Artifact
}

// open fetches and validates the image manifest ref names, following an
// index to the one manifest it should use.
func (o *OCI) open(ctx context.Context, r *imageRef) (*opened, error) {
	src, err := o.source(r)
	if err != nil {
		return nil, err
	}
	d, size := r.digest, int64(-1)
	if !r.pinned() {
		if d, size, err = src.resolveTag(ctx, r.tag); err != nil {
			return nil, err
		}
		if err := checkDigest(d); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactIntegrityFailed, err, r.String())
		}
	}
	raw, err := src.manifest(ctx, d, size)
	if err != nil {
		return nil, err
	}
	doc, err := parseManifest(raw, d)
	if err != nil {
		return nil, err
	}
	var indexDigest string
	var indexAnn map[string]string
	if isIndex(doc.MediaType) {
		child, err := pickManifest(&doc, r)
		if err != nil {
			return nil, err
		}
		indexDigest, indexAnn = d, doc.Annotations
		d = child.Digest
		if raw, err = src.manifest(ctx, d, child.Size); err != nil {
			return nil, err
		}
		if doc, err = parseManifest(raw, d); err != nil {
			return nil, err
		}
		if isIndex(doc.MediaType) {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: nested image indexes are not supported", r)
		}
	}
	if !isImageManifest(doc.MediaType) {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: unknown manifest media type %q", r, doc.MediaType)
	}
	if doc.Config == nil {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: manifest %s has no config", r, d)
	}
	art := Artifact{
		Ref:             r.canonical(d),
		Digest:          d,
		MediaType:       doc.MediaType,
		ArtifactType:    doc.ArtifactType,
		ConfigMediaType: doc.Config.MediaType,
		Version:         doc.Annotations[AnnotationVersion],
		Index:           indexDigest,
		Size:            int64(len(raw)) + doc.Config.Size,
	}
	if art.Version == "" {
		art.Version = indexAnn[AnnotationVersion]
	}
	switch doc.Config.MediaType {
	case MediaTypeWasmConfig, mediaTypeOCIEmpty:
		art.Layout = LayoutWasm
	case mediaTypeOCIConfig, mediaTypeDockerConfig:
		art.Layout = LayoutImage
	default:
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: unknown config media type %q (want %s or an image config)", r, doc.Config.MediaType, MediaTypeWasmConfig)
	}
	for _, l := range append([]descriptor{*doc.Config}, doc.Layers...) {
		if err := checkDigest(l.Digest); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactRefused, err, fmt.Sprintf("%s: manifest %s", r, d))
		}
		if l.Size < 0 {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: descriptor %s has a negative size", r, l.Digest)
		}
	}
	if doc.Config.Size > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: config %s is %d bytes, over the %d-byte cap", r, doc.Config.Digest, doc.Config.Size, MaxManifestSize)
	}
	for _, l := range doc.Layers {
		art.Layers = append(art.Layers, Layer{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Title: l.Annotations[AnnotationTitle]})
		art.Size += l.Size
	}
	return &opened{src: src, ref: r, raw: raw, doc: doc, art: art}, nil
}

func parseManifest(raw []byte, d string) (manifestDoc, error) {
	var doc manifestDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return doc, toolerr.Wrap(toolerr.ArtifactRefused, err, fmt.Sprintf("manifest %s is not valid JSON", d))
	}
	if doc.SchemaVersion != 2 {
		return doc, toolerr.New(toolerr.ArtifactRefused, "manifest %s has schemaVersion %d, want 2", d, doc.SchemaVersion)
	}
	if doc.MediaType == "" { // optional in OCI documents: infer it
		switch {
		case doc.Manifests != nil && doc.Config == nil:
			doc.MediaType = mediaTypeOCIIndex
		case doc.Config != nil:
			doc.MediaType = mediaTypeOCIManifest
		}
	}
	return doc, nil
}

// pickManifest chooses the manifest of an index: the only one, or the one
// for a Wasm platform (wasip1, wasip2, wasi / wasm).
func pickManifest(idx *manifestDoc, r *imageRef) (descriptor, error) {
	var cands []descriptor
	for _, m := range idx.Manifests {
		if !isImageManifest(m.MediaType) {
			continue
		}
		cands = append(cands, m)
	}
	pick := func(m descriptor) (descriptor, error) {
		if err := checkDigest(m.Digest); err != nil {
			return m, toolerr.Wrap(toolerr.ArtifactRefused, err, r.String())
		}
		return m, nil
	}
	if len(cands) == 1 {
		return pick(cands[0])
	}
	for _, m := range cands {
		if p := m.Platform; p != nil && p.Architecture == "wasm" {
			return pick(m)
		}
	}
	if len(cands) == 0 {
		return descriptor{}, toolerr.New(toolerr.ArtifactRefused, "%s: the image index lists no image manifest", r)
	}
	return descriptor{}, toolerr.New(toolerr.ArtifactRefused, "%s: the image index lists %d manifests and none for the wasm platform; pin one by digest", r, len(cands))
}

// Resolve implements Resolver for oci refs: it fetches (or finds in the
// cache) the manifest imageRef names, checks artifactVersion against its
// org.opencontainers.image.version annotation, and returns the module
// modulePath names, verified against its digest. Failures:
// artifact-unavailable (not found, unreachable), artifact-integrity-failed
// (digest, size or version mismatch), artifact-refused (over a size cap,
// unknown media type, unsafe cache directory), deadline-exceeded/cancelled.
func (o *OCI) Resolve(ctx context.Context, ref Ref) (*Module, error) {
	if ref.Kind != KindOCI {
		return nil, toolerr.New(toolerr.ArtifactRefused, "the OCI resolver cannot resolve a %s ref", kindName(ref.Kind))
	}
	if ref.ModulePath == "" {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "oci ref %q has no modulePath", ref.ImageRef)
	}
	r, err := parseImageRef(ref.ImageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	if ref.ArtifactVersion != "" && op.art.Version != ref.ArtifactVersion {
		got := fmt.Sprintf("%q", op.art.Version)
		if op.art.Version == "" {
			got = "absent"
		}
		e := toolerr.New(toolerr.ArtifactIntegrityFailed, "%s: artifactVersion %q does not match the manifest's %s annotation (%s)", r, ref.ArtifactVersion, AnnotationVersion, got)
		e.Details = map[string]any{"artifactVersion": ref.ArtifactVersion, "manifestVersion": op.art.Version, "digest": op.art.Digest}
		return nil, e
	}
	b, d, err := o.module(ctx, op, ref.ModulePath)
	if err != nil {
		return nil, err
	}
	return &Module{Bytes: b, Digest: d, Source: op.art.Ref + "#" + ref.ModulePath}, nil
}

func cleanPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// module returns the bytes and digest of modulePath inside the artifact.
func (o *OCI) module(ctx context.Context, op *opened, modulePath string) ([]byte, string, error) {
	want := cleanPath(modulePath)
	if op.art.Layout == LayoutWasm {
		var found *descriptor
		var titles []string
		for i, l := range op.doc.Layers {
			t := l.Annotations[AnnotationTitle]
			if t == "" {
				continue
			}
			titles = append(titles, t)
			if cleanPath(t) != want {
				continue
			}
			if found != nil {
				return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: two layers are titled %q", op.ref, t)
			}
			found = &op.doc.Layers[i]
		}
		if found == nil {
			return nil, "", toolerr.New(toolerr.ArtifactUnavailable, "%s has no module %q (its layers are titled: %s)", op.ref, modulePath, strings.Join(titles, ", "))
		}
		if !isWasmLayer(found.MediaType) {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %q has media type %q, not %s", op.ref, modulePath, found.MediaType, MediaTypeWasmLayer)
		}
		b, err := o.readBlob(ctx, op.src, *found)
		return b, found.Digest, err
	}
	return o.moduleFromImage(ctx, op, modulePath, want)
}

// readBlob reads a whole blob, verified, after checking its size against the cap.
func (o *OCI) readBlob(ctx context.Context, src source, l descriptor) ([]byte, error) {
	if l.Size > o.cfg.maxBlob {
		return nil, toolerr.New(toolerr.ArtifactRefused, "blob %s is %d bytes, over the %d-byte cap", l.Digest, l.Size, o.cfg.maxBlob)
	}
	b, err := readAll(ctx, src, l)
	if _, remote := src.(*remoteSource); remote && errors.Is(err, toolerr.ArtifactIntegrityFailed) {
		// A cached copy that went bad was removed: fetch it once more.
		b, err = readAll(ctx, src, l)
	}
	return b, err
}

func readAll(ctx context.Context, src source, l descriptor) ([]byte, error) {
	rc, err := src.blob(ctx, l.Digest, l.Size, nil)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := bytes.NewBuffer(make([]byte, 0, l.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(rc); err != nil {
		return nil, readError(ctx, err, l.Digest)
	}
	return buf.Bytes(), nil
}

func readError(ctx context.Context, err error, d string) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		return toolerr.As(ctx.Err())
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "reading blob "+d)
}

// moduleFromImage finds modulePath in an image's tar layers, top layer
// first, honouring whiteouts. The module is cached as its own blob and the
// finding memoised, so a later resolve reads neither layer.
func (o *OCI) moduleFromImage(ctx context.Context, op *opened, modulePath, want string) ([]byte, string, error) {
	rs, remote := op.src.(*remoteSource)
	if remote {
		if md, ok := rs.cache.lookupModule(op.art.Digest, want); ok {
			if b, err := rs.cache.readBlob(md, -1); err == nil {
				return b, md, nil
			}
		}
	}
layers:
	for i := len(op.doc.Layers) - 1; i >= 0; i-- {
		l := op.doc.Layers[i]
		isTar, gz := tarLayer(l.MediaType)
		if !isTar {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has media type %q, not a tar layer", op.ref, l.Digest, l.MediaType)
		}
		if l.Size > o.cfg.maxBlob {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s is %d bytes, over the %d-byte cap", op.ref, l.Digest, l.Size, o.cfg.maxBlob)
		}
		res, err := o.scanLayer(ctx, op.src, l, gz, want, 0)
		if err != nil {
			return nil, "", err
		}
		switch res.state {
		case tarFound:
			d := Digest(res.data)
			if remote {
				if err := rs.cache.putBytes(d, res.data); err == nil {
					rs.cache.rememberModule(op.art.Digest, want, d)
				}
			}
			return res.data, d, nil
		case tarDeleted, tarOpaque:
			break layers // lower layers are hidden
		}
	}
	return nil, "", toolerr.New(toolerr.ArtifactUnavailable, "%s has no file %q in its layers", op.ref, modulePath)
}

type tarState int

const (
	tarAbsent tarState = iota
	tarFound
	tarDeleted
	tarOpaque
)

type scanResult struct {
	state tarState
	data  []byte
}

// scanLayer reads one tar layer to its end (so its digest is verified) and
// reports what it says about path want.
func (o *OCI) scanLayer(ctx context.Context, src source, l descriptor, gz bool, want string, depth int) (scanResult, error) {
	rc, err := src.blob(ctx, l.Digest, l.Size, nil)
	if err != nil {
		return scanResult{}, err
	}
	defer rc.Close()
	// A layer that does not parse may simply have been tampered with: when
	// its digest is wrong too, that is the error to report.
	parseErr := func(ctx context.Context, err error, l descriptor) error {
		if _, derr := io.Copy(io.Discard, rc); errors.Is(derr, toolerr.ArtifactIntegrityFailed) {
			return derr
		}
		return layerError(ctx, err, l)
	}
	var r io.Reader = rc
	if gz {
		zr, err := gzip.NewReader(rc)
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		defer zr.Close()
		r = zr
	}
	lim := &io.LimitedReader{R: r, N: maxUnpacked + 1}
	tr := tar.NewReader(lim)
	var res scanResult
	var link string
	for {
		if err := ctx.Err(); err != nil {
			return scanResult{}, toolerr.As(err)
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		name := cleanPath(h.Name)
		hdir, hbase := path.Dir(name), path.Base(name)
		switch {
		case name == want:
			switch h.Typeflag {
			case tar.TypeReg: // archive/tar reports old TypeRegA entries as TypeReg
				if h.Size > o.cfg.maxBlob {
					return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is %d bytes, over the %d-byte cap", want, l.Digest, h.Size, o.cfg.maxBlob)
				}
				b, err := io.ReadAll(io.LimitReader(tr, h.Size))
				if err != nil {
					return scanResult{}, parseErr(ctx, err, l)
				}
				res = scanResult{state: tarFound, data: b}
				link = ""
			case tar.TypeLink:
				link = cleanPath(h.Linkname)
				res = scanResult{state: tarFound}
			case tar.TypeSymlink:
				return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is a symbolic link; point modulePath at the file", want, l.Digest)
			default:
				return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is not a regular file", want, l.Digest)
			}
		case strings.HasPrefix(hbase, ".wh.") && hbase != ".wh..wh..opq":
			// dir/.wh.x deletes dir/x and, for a directory, all below it.
			gone := path.Join(hdir, strings.TrimPrefix(hbase, ".wh."))
			if (gone == want || strings.HasPrefix(want, gone+"/")) && res.state != tarFound {
				res = scanResult{state: tarDeleted}
			}
		case hbase == ".wh..wh..opq" && (hdir == "." || strings.HasPrefix(want, hdir+"/")):
			if res.state != tarFound {
				res = scanResult{state: tarOpaque}
			}
		}
	}
	if lim.N <= 0 {
		return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "layer %s unpacks to more than %d bytes", l.Digest, int64(maxUnpacked))
	}
	// Drain what the tar reader left (padding, gzip trailer) so the
	// verifier sees the whole blob; only then are the bytes trusted.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return scanResult{}, readError(ctx, err, l.Digest)
	}
	if res.state == tarFound && res.data == nil {
		if depth > 0 || link == "" || link == want {
			return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is a hard link that cannot be followed", want, l.Digest)
		}
		sub, err := o.scanLayer(ctx, src, l, gz, link, depth+1)
		if err != nil {
			return scanResult{}, err
		}
		if sub.state != tarFound {
			return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s links to %q, which the layer lacks", want, l.Digest, link)
		}
		return sub, nil
	}
	return res, nil
}

func layerError(ctx context.Context, err error, l descriptor) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		return toolerr.As(ctx.Err())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, tar.ErrHeader) {
		return toolerr.Wrap(toolerr.ArtifactRefused, err, fmt.Sprintf("layer %s (%s) is not a valid archive", l.Digest, l.MediaType))
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "reading layer "+l.Digest)
}

// Inspect fetches the manifest imageRef names (not its layers) and
// describes it.
func (o *OCI) Inspect(ctx context.Context, imageRef string) (*Artifact, error) {
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	return &op.art, nil
}

// Progress reports bytes moved for one blob of a pull or push.
type Progress struct {
	Digest string
	Done   int64
	Total  int64
}

// CallOption configures one Pull or Push.
type CallOption func(*callOptions)

type callOptions struct {
	progress func(Progress)
}

// WithProgress has fn called as bytes move (from the calling goroutine).
func WithProgress(fn func(Progress)) CallOption {
	return func(o *callOptions) { o.progress = fn }
}

// Pull fetches the manifest imageRef names and every blob it references
// (config and layers) into the cache, each verified, and describes the
// artifact. For oci-layout refs it verifies every blob in place.
func (o *OCI) Pull(ctx context.Context, imageRef string, opts ...CallOption) (*Artifact, error) {
	var co callOptions
	for _, opt := range opts {
		opt(&co)
	}
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	blobs := append([]descriptor{*op.doc.Config}, op.doc.Layers...)
	for _, l := range blobs {
		if l.Size > o.cfg.maxBlob {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: blob %s is %d bytes, over the %d-byte cap", r, l.Digest, l.Size, o.cfg.maxBlob)
		}
	}
	for _, l := range blobs {
		var fn func(int64)
		if co.progress != nil {
			dg, total := l.Digest, l.Size
			fn = func(n int64) { co.progress(Progress{Digest: dg, Done: n, Total: total}) }
			fn(0)
		}
		rc, err := op.src.blob(ctx, l.Digest, l.Size, fn)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return nil, readError(ctx, err, l.Digest)
		}
		if fn != nil {
			fn(l.Size)
		}
	}
	return &op.art, nil
}

// flight makes concurrent downloads of one digest share one transfer.
type flight struct {
	mu sync.Mutex
	m  map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	err  error
}

func (f *flight) do(ctx context.Context, key string, fn func() error) error {
	f.mu.Lock()
	if c, ok := f.m[key]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
			if c.err != nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) && ctx.Err() == nil {
				return f.do(ctx, key, fn) // the leader gave up; try on our own time
			}
			return c.err
		case <-ctx.Done():
			return toolerr.As(ctx.Err())
		}
	}
	c := &flightCall{done: make(chan struct{})}
	f.m[key] = c
	f.mu.Unlock()
	c.err = fn()
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
	close(c.done)
	return c.err
}
