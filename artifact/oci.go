package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/klauspost/compress/zstd"

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
	// DefaultConcurrency is how many blobs a pull fetches at once.
	DefaultConcurrency = 4
	// DefaultRequestTimeout bounds each registry request: its answer must
	// start, and its body may pause, no longer than this.
	DefaultRequestTimeout = 30 * time.Second
	// maxUnpacked caps the bytes of a tar layer scanned for a module.
	maxUnpacked = 4 << 30
	// maxZstdWindow caps the memory a zstd layer's decoder may ask for
	// (zstd -19 uses 8 MiB, --long=27 128 MiB).
	maxZstdWindow = 128 << 20
)

// OCIConfig holds an OCI resolver's long-lived settings. It is immutable:
// every With method returns a changed copy. Start from NewOCIConfig;
// NewOCI validates it.
type OCIConfig struct {
	verifyKeys     []crypto.PublicKey
	fsync          bool
	concurrency    int
	caFiles        []string
	certsDir       string
	log            *slog.Logger
	requestTimeout time.Duration
	cacheDir       string
	insecure       []string
	keychain       authn.Keychain
	tagTTL         time.Duration
	maxBlob        int64
}

// NewOCIConfig returns the defaults: the cache in DefaultOCICacheDir,
// credentials from the docker config keychain (~/.docker/config.json and
// its credential helpers; anonymous when it has none), TLS to every
// registry, DefaultTagTTL, and blobs capped at DefaultMaxModuleSize.
func NewOCIConfig() OCIConfig {
	return OCIConfig{concurrency: DefaultConcurrency, certsDir: DefaultCertsDir, keychain: authn.DefaultKeychain, tagTTL: DefaultTagTTL, maxBlob: DefaultMaxModuleSize, requestTimeout: DefaultRequestTimeout}
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

// WithVerifyKeys requires every resolved or pulled artifact to carry a
// cosign key-based signature (simple signing) by one of keys over its
// manifest digest (or its index's), found through the referrers API, the
// referrers tag schema or cosign's .sig tag (see LoadVerifyKey). An
// unsigned artifact is artifact-refused; one whose signatures do not
// verify is artifact-integrity-failed.
func (c OCIConfig) WithVerifyKeys(keys ...crypto.PublicKey) OCIConfig {
	c.verifyKeys = append([]crypto.PublicKey(nil), keys...)
	return c
}

// WithFsync has every blob written to the cache fsynced before it is
// renamed into place, so it survives a power loss. Off by default: blobs
// are verified whenever they are read, so one lost or truncated by a
// power loss is fetched again, never used (measured: fsync made a 50 MB
// pull 1.2× slower).
func (c OCIConfig) WithFsync(on bool) OCIConfig {
	c.fsync = on
	return c
}

// WithConcurrency sets how many blobs a Pull fetches at once (default
// DefaultConcurrency).
func (c OCIConfig) WithConcurrency(n int) OCIConfig {
	c.concurrency = n
	return c
}

// WithRegistryCA adds the CA certificates of these PEM files to the roots
// every registry's certificate is verified against (beside the system
// roots, SSL_CERT_FILE/SSL_CERT_DIR, and the certs directory).
func (c OCIConfig) WithRegistryCA(files ...string) OCIConfig {
	c.caFiles = append([]string(nil), files...)
	return c
}

// WithCertsDir sets the docker-style certs directory: the *.crt files of
// <dir>/<host:port>/ (or <dir>/<host>/ for port 443) are trusted for that
// registry. Default DefaultCertsDir; "" turns it off.
func (c OCIConfig) WithCertsDir(dir string) OCIConfig {
	c.certsDir = dir
	return c
}

// WithLogger has the resolver log its registry work as events on l:
// artifact-resolve (a ref being resolved), artifact-download (a blob
// fetched from a registry, with the imageRef being resolved as ref, the
// repo, digest and size: at the start, every 5 s while one over LargeBlob
// streams, and at the end with bytes and milliseconds), and
// artifact-failed. nil (the default) logs nothing.
func (c OCIConfig) WithLogger(l *slog.Logger) OCIConfig {
	c.log = l
	return c
}

// WithRequestTimeout sets the deadline of each registry request (the auth
// handshake, a HEAD, a manifest or blob GET): the answer must start within
// d, and a body may go d without a byte. A request that passes it fails
// with deadline-exceeded naming the step. Default DefaultRequestTimeout.
func (c OCIConfig) WithRequestTimeout(d time.Duration) OCIConfig {
	c.requestTimeout = d
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

	cacheMu sync.Mutex
	cache   *cache
	flight  flight
	mu      sync.Mutex
	regs    map[string]*registryClient
	tags    map[string]tagEntry
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
	if cfg.concurrency <= 0 {
		return nil, fmt.Errorf("artifact: the fetch concurrency must be positive, got %d", cfg.concurrency)
	}
	if cfg.requestTimeout <= 0 {
		return nil, fmt.Errorf("artifact: the registry request timeout must be positive, got %s", cfg.requestTimeout)
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
	roots, err := newTLSRoots(cfg.caFiles, cfg.certsDir)
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		DialTLSContext:        roots.dialTLS(dialer),
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
	o.pullTransport = &retryTransport{inner: &schemeGuard{inner: &realmRewriter{inner: base}, insecure: ins}}
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
	c, err := openCache(dir, o.cfg.fsync)
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
	// fetch makes sure blob d is present and verified (downloading it, or
	// reading it once to verify it), without handing its bytes out.
	fetch(ctx context.Context, d string, size int64, progress func(int64)) error
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
	// Version is the artifact's org.opencontainers.image.version: the
	// manifest annotation, else the index's, else the image config label
	// ("" if none has it). VersionFrom says which.
	Version     string `json:"version,omitempty"`
	VersionFrom string `json:"versionFrom,omitempty"`
	// Architecture and OS are the config's ("" when it has none).
	Architecture string `json:"architecture,omitempty"`
	OS           string `json:"os,omitempty"`
	// Size is the manifest, config and layer bytes together.
	Size int64 `json:"size"`
	// Index is the digest of the image index the manifest was chosen from.
	Index string `json:"index,omitempty"`
	// IndexManifests lists the index's entries when the manifest was
	// chosen from one.
	IndexManifests []IndexEntry `json:"indexManifests,omitempty"`
	// Layers lists the layers in order.
	Layers []Layer `json:"layers"`
	// Referrers lists the signatures and other manifests that refer to the
	// artifact or its index (Inspect only).
	Referrers []Referrer `json:"referrers,omitempty"`
}

// IndexEntry is one manifest an image index lists.
type IndexEntry struct {
	Digest       string `json:"digest"`
	MediaType    string `json:"mediaType"`
	ArtifactType string `json:"artifactType,omitempty"`
	// Platform is "architecture/os" from the descriptor ("" when it has none).
	Platform string `json:"platform,omitempty"`
	// Chosen marks the entry sandboxd resolves.
	Chosen bool `json:"chosen,omitempty"`
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
	src      source
	ref      *imageRef
	raw      []byte
	doc      manifestDoc
	art      Artifact
	indexAnn map[string]string
}

// open fetches and validates the image manifest ref names, following an
// index to the one manifest it should use, and reads and checks its config.
func (o *OCI) open(ctx context.Context, r *imageRef) (*opened, error) {
	op, err := o.openManifest(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := o.openConfig(ctx, op); err != nil {
		return nil, err
	}
	return op, nil
}

// openManifest is open's first half: the manifest (through an index),
// checked, with the Artifact filled but for what the config says.
func (o *OCI) openManifest(ctx context.Context, r *imageRef) (*opened, error) {
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
	var entries []IndexEntry
	if isIndex(doc.MediaType) {
		child, err := o.pickManifest(ctx, src, &doc, r)
		if err != nil {
			return nil, err
		}
		for _, m := range doc.Manifests {
			e := IndexEntry{Digest: m.Digest, MediaType: m.MediaType, ArtifactType: m.ArtifactType, Chosen: m.Digest == child.Digest}
			if m.Platform != nil {
				e.Platform = m.Platform.Architecture + "/" + m.Platform.OS
			}
			entries = append(entries, e)
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
	if err := checkImageManifest(&doc, r, d); err != nil {
		return nil, err
	}
	art := Artifact{
		Ref:             r.canonical(d),
		Digest:          d,
		MediaType:       doc.MediaType,
		ArtifactType:    doc.ArtifactType,
		ConfigMediaType: doc.Config.MediaType,
		Index:           indexDigest,
		IndexManifests:  entries,
		Size:            int64(len(raw)) + doc.Config.Size,
	}
	switch {
	case isWasmConfig(doc.Config.MediaType):
		art.Layout = LayoutWasm
	case doc.Config.MediaType == mediaTypeOCIConfig || doc.Config.MediaType == mediaTypeDockerConfig:
		art.Layout = LayoutImage
	default:
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: unknown config media type %q (want %s, %s or an image config)", r, doc.Config.MediaType, MediaTypeWasmConfig, MediaTypeWasmConfigV1)
	}
	for _, l := range doc.Layers {
		art.Layers = append(art.Layers, Layer{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Title: l.Annotations[AnnotationTitle]})
		art.Size += l.Size
	}
	return &opened{src: src, ref: r, raw: raw, doc: doc, art: art, indexAnn: indexAnn}, nil
}

// openConfig is open's second half: it reads and checks op's config and
// fills in the platform and the version.
func (o *OCI) openConfig(ctx context.Context, op *opened) error {
	cfg, err := o.readConfig(ctx, op.src, *op.doc.Config, op.ref)
	if err != nil {
		return err
	}
	art := &op.art
	art.Architecture, art.OS = cfg.Architecture, cfg.OS
	if art.Layout == LayoutWasm {
		if err := checkWasmPlatform(cfg, op.ref, art.Digest); err != nil {
			return err
		}
	}
	// The version rule: the manifest's annotation, else the index's, else
	// the image config's label (docker build --label, crane mutate --label).
	for _, c := range []struct{ v, from string }{
		{op.doc.Annotations[AnnotationVersion], VersionFromManifest},
		{op.indexAnn[AnnotationVersion], VersionFromIndex},
		{cfg.Config.Labels[AnnotationVersion], VersionFromLabel},
	} {
		if c.v != "" {
			art.Version, art.VersionFrom = c.v, c.from
			break
		}
	}
	return nil
}

// Where an Artifact's Version was found.
const (
	VersionFromManifest = "manifest annotation"
	VersionFromIndex    = "index annotation"
	VersionFromLabel    = "config label"
)

// checkImageManifest checks what open relies on in an image manifest d:
// its media type, a config, sha256 digests and sizes, the config's cap.
func checkImageManifest(doc *manifestDoc, r *imageRef, d string) error {
	if !isImageManifest(doc.MediaType) {
		return toolerr.New(toolerr.ArtifactRefused, "%s: unknown manifest media type %q", r, doc.MediaType)
	}
	if doc.Config == nil {
		return toolerr.New(toolerr.ArtifactRefused, "%s: manifest %s has no config", r, d)
	}
	for _, l := range append([]descriptor{*doc.Config}, doc.Layers...) {
		if err := checkDigest(l.Digest); err != nil {
			return toolerr.Wrap(toolerr.ArtifactRefused, err, fmt.Sprintf("%s: manifest %s", r, d))
		}
		if l.Size < 0 {
			return toolerr.New(toolerr.ArtifactRefused, "%s: descriptor %s has a negative size", r, l.Digest)
		}
	}
	if doc.Config.Size > MaxManifestSize {
		return toolerr.New(toolerr.ArtifactRefused, "%s: config %s is %d bytes, over the %d-byte cap", r, doc.Config.Digest, doc.Config.Size, MaxManifestSize)
	}
	return nil
}

// configDoc is what sandboxd reads of a config: the CNCF Wasm config's
// architecture, os and component, an image config's labels.
type configDoc struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Component    json.RawMessage `json:"component,omitempty"`
	Config       struct {
		Labels map[string]string `json:"Labels"`
	} `json:"config"`
}

// readConfig fetches (or reads from the cache) the config blob, verified,
// and parses it. The OCI empty config is not fetched.
func (o *OCI) readConfig(ctx context.Context, src source, cd descriptor, r *imageRef) (*configDoc, error) {
	var cfg configDoc
	if cd.MediaType == mediaTypeOCIEmpty {
		return &cfg, nil
	}
	b, err := o.readBlob(ctx, src, cd)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: config %s (%s) is not a JSON object", r, cd.Digest, cd.MediaType)
	}
	return &cfg, nil
}

// checkWasmPlatform refuses a Wasm-layout artifact whose config names
// another architecture, a component (os wasip2, or a component section)
// or an unknown os. Absent fields (wasm-to-oci's config is {}) pass.
func checkWasmPlatform(cfg *configDoc, r *imageRef, d string) error {
	if cfg.Architecture != "" && cfg.Architecture != "wasm" {
		return toolerr.New(toolerr.ArtifactRefused, "%s: config of %s says architecture %q, want wasm", r, d, cfg.Architecture)
	}
	if cfg.OS == "wasip2" || len(cfg.Component) > 0 && string(cfg.Component) != "null" {
		return componentRefusal(r, d)
	}
	switch cfg.OS {
	case "", "wasip1", "wasi":
		return nil
	}
	return toolerr.New(toolerr.ArtifactRefused, "%s: config of %s says os %q; sandboxd runs wasip1 modules", r, d, cfg.OS)
}

func componentRefusal(r *imageRef, d string) error {
	return toolerr.New(toolerr.ArtifactRefused, "%s: %s is a WebAssembly component (wasip2); sandboxd runs core modules (wasip1): push a wasip1 build of the handler", r, d)
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

// Ranks of an index entry, best first.
const (
	rankWasip1    = iota // platform or config: wasm/wasip1
	rankWasm             // wasm with os wasi or none given
	rankOther            // another platform (an image whose files are read)
	rankComponent        // wasm/wasip2: a component, refused
)

// pickManifest chooses the manifest of an index. An entry's platform comes
// from its descriptor, or, when the descriptor has none (ORAS's `manifest
// index create` writes only artifactType), from its manifest's config. The
// first wasm/wasip1 entry wins, then wasm with os wasi or none, then (when
// it is the only one) another platform; wasm/wasip2 entries are
// components and are refused.
func (o *OCI) pickManifest(ctx context.Context, src source, idx *manifestDoc, r *imageRef) (descriptor, error) {
	var cands []descriptor
	for _, m := range idx.Manifests {
		if !isImageManifest(m.MediaType) {
			continue
		}
		if err := checkDigest(m.Digest); err != nil {
			return m, toolerr.Wrap(toolerr.ArtifactRefused, err, r.String())
		}
		cands = append(cands, m)
	}
	switch len(cands) {
	case 0:
		return descriptor{}, toolerr.New(toolerr.ArtifactRefused, "%s: the image index lists no image manifest", r)
	case 1:
		return cands[0], nil
	}
	best, bestRank, others := -1, rankComponent+1, 0
	var components []string
	for i, m := range cands {
		rank, err := o.rankEntry(ctx, src, m)
		if err != nil {
			return descriptor{}, err
		}
		switch rank {
		case rankComponent:
			components = append(components, m.Digest)
			continue
		case rankOther:
			others++
		}
		if rank < bestRank {
			best, bestRank = i, rank
		}
	}
	switch {
	case best >= 0 && (bestRank != rankOther || others == 1):
		return cands[best], nil
	case best < 0 && len(components) > 0:
		return descriptor{}, toolerr.New(toolerr.ArtifactRefused, "%s: the image index offers only WebAssembly components (wasm/wasip2: %s); sandboxd runs core modules (wasip1): add a wasip1 build to the index", r, strings.Join(components, ", "))
	}
	return descriptor{}, toolerr.New(toolerr.ArtifactRefused, "%s: the image index lists %d manifests and none for the wasm platform; pin one by digest", r, len(cands))
}

func rankPlatform(arch, os string) int {
	switch {
	case arch == "wasm" && os == "wasip1":
		return rankWasip1
	case arch == "wasm" && os == "wasip2":
		return rankComponent
	case arch == "wasm" && (os == "" || os == "wasi"):
		return rankWasm
	}
	return rankOther
}

// rankEntry ranks one index entry by its platform, reading its manifest
// and config when the descriptor carries no platform.
func (o *OCI) rankEntry(ctx context.Context, src source, m descriptor) (int, error) {
	if p := m.Platform; p != nil {
		return rankPlatform(p.Architecture, p.OS), nil
	}
	raw, err := src.manifest(ctx, m.Digest, m.Size)
	if err != nil {
		return 0, err
	}
	doc, err := parseManifest(raw, m.Digest)
	if err != nil {
		return 0, err
	}
	if doc.Config == nil || checkDigest(doc.Config.Digest) != nil || doc.Config.Size > MaxManifestSize || doc.Config.Size < 0 {
		return rankOther, nil
	}
	wasmType := isWasmConfig(doc.Config.MediaType) || strings.HasPrefix(doc.ArtifactType, "application/vnd.wasm.") || strings.HasPrefix(m.ArtifactType, "application/vnd.wasm.")
	cfg, err := o.readConfig(ctx, src, *doc.Config, &imageRef{raw: m.Digest})
	if err != nil {
		return 0, err
	}
	if wasmType && cfg.Architecture == "" {
		cfg.Architecture = "wasm"
	}
	if cfg.Architecture == "wasm" && len(cfg.Component) > 0 && string(cfg.Component) != "null" {
		return rankComponent, nil
	}
	return rankPlatform(cfg.Architecture, cfg.OS), nil
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
	o.logInfo("artifact-resolve", "imageRef", ref.ImageRef, "modulePath", ref.ModulePath)
	m, err := o.resolve(ctx, r, ref)
	if err != nil {
		o.logError("artifact-failed", "imageRef", ref.ImageRef, "modulePath", ref.ModulePath, "error", err.Error())
	}
	return m, err
}

func (o *OCI) resolve(ctx context.Context, r *imageRef, ref Ref) (*Module, error) {
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(op, ref.ArtifactVersion); err != nil {
		return nil, err
	}
	if len(o.cfg.verifyKeys) > 0 {
		if err := o.verifySignatures(ctx, op); err != nil {
			return nil, err
		}
	}
	b, d, err := o.module(ctx, op, ref.ModulePath)
	if err != nil {
		return nil, err
	}
	return &Module{Bytes: b, Digest: d, Source: op.art.Ref + "#" + ref.ModulePath}, nil
}

func (o *OCI) logInfo(kind string, args ...any) {
	if o.cfg.log != nil {
		o.cfg.log.Info(kind, args...)
	}
}

func (o *OCI) logError(kind string, args ...any) {
	if o.cfg.log != nil {
		o.cfg.log.Error(kind, args...)
	}
}

// ForgetTags drops every remembered tag → digest resolution, so the next
// resolve of a tag asks the registry (serve calls it on SIGHUP: a reload
// must see where tags point now, not within the tag TTL).
func (o *OCI) ForgetTags() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.tags)
}

// checkVersion compares a ref's artifactVersion with the artifact's
// version (see open for where it is looked for). A mismatch is
// artifact-integrity-failed; an artifact with no version at all is
// artifact-refused: it cannot satisfy a versioned ref.
func checkVersion(op *opened, want string) error {
	if want == "" || op.art.Version == want {
		return nil
	}
	if op.art.Version == "" {
		e := toolerr.New(toolerr.ArtifactRefused, "%s carries no version, so artifactVersion %q cannot be checked: none of the manifest annotation, the index annotation or the image config label %s is set (push with --annotation %s=%s, or crane mutate --label)", op.ref, want, AnnotationVersion, AnnotationVersion, want)
		e.Details = map[string]any{"artifactVersion": want, "digest": op.art.Digest}
		return e
	}
	e := toolerr.New(toolerr.ArtifactIntegrityFailed, "%s: artifactVersion %q does not match the artifact's version %q (from its %s %s)", op.ref, want, op.art.Version, op.art.VersionFrom, AnnotationVersion)
	e.Details = map[string]any{"artifactVersion": want, "manifestVersion": op.art.Version, "versionFrom": op.art.VersionFrom, "digest": op.art.Digest}
	return e
}

func cleanPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// module returns the bytes and digest of modulePath inside the artifact.
func (o *OCI) module(ctx context.Context, op *opened, modulePath string) ([]byte, string, error) {
	want := cleanPath(modulePath)
	if op.art.Layout == LayoutWasm {
		found, err := wasmLayer(op, modulePath, want)
		if err != nil {
			return nil, "", err
		}
		b, err := o.readBlob(ctx, op.src, *found)
		if err == nil && isComponent(b) {
			err = componentRefusal(op.ref, found.Digest)
		}
		return b, found.Digest, err
	}
	b, d, err := o.moduleFromImage(ctx, op, modulePath, want)
	if err == nil && isComponent(b) {
		err = componentRefusal(op.ref, d)
	}
	return b, d, err
}

// wasmLayer finds the layer of a Wasm-layout artifact that modulePath
// names: the one whose title equals it or, when the artifact has exactly
// one Wasm layer and that layer has no title (what oci-wasm, wkg and wash
// push), that layer whatever modulePath says.
func wasmLayer(op *opened, modulePath, want string) (*descriptor, error) {
	var found, untitled *descriptor
	var titles []string
	wasmLayers := 0
	for i, l := range op.doc.Layers {
		if isWasmLayer(l.MediaType) {
			wasmLayers++
		}
		t := l.Annotations[AnnotationTitle]
		if t == "" {
			if isWasmLayer(l.MediaType) {
				untitled = &op.doc.Layers[i]
			}
			continue
		}
		titles = append(titles, t)
		if cleanPath(t) != want {
			continue
		}
		if found != nil {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: two layers are titled %q", op.ref, t)
		}
		found = &op.doc.Layers[i]
	}
	if found == nil && untitled != nil && wasmLayers == 1 {
		found = untitled
	}
	if found == nil {
		if len(titles) == 0 {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "%s has no module %q: it has %d Wasm layers and none is titled (%s)", op.ref, modulePath, wasmLayers, AnnotationTitle)
		}
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "%s has no module %q (its layers are titled: %s)", op.ref, modulePath, strings.Join(titles, ", "))
	}
	if !isWasmLayer(found.MediaType) {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: layer %q has media type %q, not %s", op.ref, modulePath, found.MediaType, MediaTypeWasmLayer)
	}
	return found, nil
}

// isComponent reports whether b is a WebAssembly component binary (the
// component model's preamble: version 0x0d, layer 1) rather than a module.
func isComponent(b []byte) bool {
	return len(b) >= 8 && string(b[:4]) == "\x00asm" && b[4] == 0x0d && b[5] == 0 && b[6] == 1 && b[7] == 0
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
		if d == "" {
			return ctxError(ctx, "pulling")
		}
		return ctxError(ctx, "reading blob "+d)
	}
	return newErr(toolerr.ArtifactUnavailable, err, "reading blob %s: %v", d, err)
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
		isTar, comp := tarLayer(l.MediaType)
		if !isTar {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has media type %q, not a tar layer", op.ref, l.Digest, l.MediaType)
		}
		if l.Size > o.cfg.maxBlob {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s is %d bytes, over the %d-byte cap", op.ref, l.Digest, l.Size, o.cfg.maxBlob)
		}
		res, err := o.scanLayer(ctx, op.src, l, comp, want, 0)
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
func (o *OCI) scanLayer(ctx context.Context, src source, l descriptor, comp string, want string, depth int) (scanResult, error) {
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
	switch comp {
	case compGzip:
		zr, err := gzip.NewReader(rc)
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		defer zr.Close()
		r = zr
	case compZstd:
		zr, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderLowmem(true))
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
		sub, err := o.scanLayer(ctx, src, l, comp, link, depth+1)
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

func isZstdError(err error) bool {
	for _, e := range []error{zstd.ErrMagicMismatch, zstd.ErrReservedBlockType, zstd.ErrCompressedSizeTooBig, zstd.ErrBlockTooSmall, zstd.ErrWindowSizeExceeded, zstd.ErrWindowSizeTooSmall, zstd.ErrCRCMismatch, zstd.ErrUnknownDictionary, zstd.ErrFrameSizeExceeded, zstd.ErrFrameSizeMismatch, zstd.ErrDecoderSizeExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func layerError(ctx context.Context, err error, l descriptor) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		return toolerr.As(ctx.Err())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrHeader) || isZstdError(err) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, tar.ErrHeader) {
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
	art := op.art
	for _, d := range []string{art.Digest, art.Index} {
		if d == "" {
			continue
		}
		// Best effort: a registry that fails the lookup still gets inspected.
		if refs, err := o.referrers(ctx, op.src, d); err == nil {
			art.Referrers = append(art.Referrers, refs...)
		}
	}
	return &art, nil
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
	progress    func(Progress)
	created     time.Time
	annotations map[string]string
	tags        []string
}

// WithAnnotations adds annotations to the manifest a Push writes (beside
// org.opencontainers.image.version, which they may not contradict).
func WithAnnotations(a map[string]string) CallOption {
	return func(o *callOptions) { o.annotations = a }
}

// WithCreated sets the created time a Push writes in the artifact's config
// (DefaultCreated when not given).
func WithCreated(t time.Time) CallOption {
	return func(o *callOptions) { o.created = t }
}

// WithTags has a Push to a registry point these tags of the target's
// repository at the pushed manifest too, after the target's own tag (as
// oras push registry/repo:t1,t2 does). Every tag is checked before
// anything is sent; a layout target refuses them.
func WithTags(tags ...string) CallOption {
	return func(o *callOptions) { o.tags = append(o.tags, tags...) }
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
	op, err := o.openManifest(ctx, r)
	if err != nil {
		return nil, err
	}
	blobs := append([]descriptor{*op.doc.Config}, op.doc.Layers...)
	for _, l := range blobs {
		if l.Size > o.cfg.maxBlob {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: blob %s is %d bytes, over the %d-byte cap", r, l.Digest, l.Size, o.cfg.maxBlob)
		}
	}
	if len(o.cfg.verifyKeys) > 0 {
		// Under a key policy nothing but the config is fetched before the
		// signature verifies.
		if err := o.openConfig(ctx, op); err != nil {
			return nil, err
		}
		if err := o.verifySignatures(ctx, op); err != nil {
			return nil, err
		}
		if err := o.fetchAll(ctx, op.src, blobs, co.progress)(); err != nil {
			return nil, err
		}
		return &op.art, nil
	}
	// Otherwise the layers download while the config is read and checked
	// (the config GET is not a round trip ahead of them); a refused config
	// cancels them. The config's two readers share one download (flight).
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := o.fetchAll(fctx, op.src, blobs, co.progress)
	if err := o.openConfig(ctx, op); err != nil {
		cancel()
		wait()
		return nil, err
	}
	if err := wait(); err != nil {
		return nil, err
	}
	return &op.art, nil
}

// fetchAll starts fetching blobs into the cache, at most cfg.concurrency
// at once; the first failure cancels the others. The returned wait blocks
// until all are done and reports the failure that caused the others'
// cancellation. progress calls are serialised.
func (o *OCI) fetchAll(ctx context.Context, src source, blobs []descriptor, progress func(Progress)) (wait func() error) {
	var pmu sync.Mutex
	cctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, o.cfg.concurrency)
	errs := make([]error, len(blobs))
	fns := make([]func(int64), len(blobs))
	for i, l := range blobs {
		if progress != nil {
			dg, total := l.Digest, l.Size
			fns[i] = func(n int64) {
				pmu.Lock()
				defer pmu.Unlock()
				progress(Progress{Digest: dg, Done: n, Total: total})
			}
			fns[i](0)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, l := range blobs {
			select {
			case sem <- struct{}{}:
			case <-cctx.Done():
				errs[i] = ctxError(ctx, "waiting to fetch blob "+l.Digest)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := src.fetch(cctx, l.Digest, l.Size, fns[i]); err != nil {
					errs[i] = err
					cancel()
					return
				}
				if fns[i] != nil {
					fns[i](l.Size)
				}
			}()
		}
	}()
	return func() error {
		wg.Wait()
		cancel()
		for _, err := range errs {
			if err != nil && !errors.Is(err, toolerr.Cancelled) {
				return readError(ctx, err, "")
			}
		}
		for _, err := range errs {
			if err != nil {
				return readError(ctx, err, "")
			}
		}
		return nil
	}
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
