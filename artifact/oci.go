package artifact

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/toolerr"
)

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

// Where an Artifact's Version was found.
const (
	VersionFromManifest = "manifest annotation"
	VersionFromIndex    = "index annotation"
	VersionFromLabel    = "config label"
)

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
