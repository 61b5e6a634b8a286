package artifact

import (
	"crypto"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
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
