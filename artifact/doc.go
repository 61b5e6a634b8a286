// Package artifact owns the resolution of a tool's codeArtifactRef into the
// bytes of a WebAssembly module and their digest: one Resolver interface,
// with filesystem (dev), OCI registry and OCI image layout backends beside
// each other, and the content-addressed cache they share.
//
// # Refs
//
// A codeArtifactRef is {kind: oci, imageRef, modulePath, artifactVersion}
// (or {kind: filesystem, modulePath} in dev mode; see Filesystem). imageRef
// is one of
//
//	registry/repo:tag                 re-resolved with HEAD once the tag TTL passed
//	registry/repo@sha256:<hex>        digest-pinned: resolves offline once cached
//	registry/repo:tag@sha256:<hex>    the digest decides
//	oci-layout:<dir>[:tag|@sha256:…]  an OCI image layout directory
//
// Only sha256 digests are accepted. DigestPinned tells pinned refs apart;
// the executor refuses an unpinned imageRef for a strict tool
// (artifact-refused).
//
// # Layouts
//
// The CNCF Wasm OCI artifact (config MediaTypeWasmConfig; each module one
// layer of MediaTypeWasmLayer or MediaTypeWasmContentLayer, named by its
// org.opencontainers.image.title annotation, which modulePath must equal),
// and ordinary images (config application/vnd.oci.image.config.v1+json or
// the Docker equivalent) whose tar or tar+gzip layers contain modulePath as
// a regular file; the top layer wins and whiteouts delete. An image index
// is followed to its only manifest or to the one for the wasm architecture.
// Several modules per artifact work in both layouts. See
// https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/.
//
// # Integrity and caps
//
// The manifest's org.opencontainers.image.version annotation must equal
// artifactVersion (artifact-integrity-failed naming both). Every manifest
// and blob is verified against its digest while it streams; a length or
// digest mismatch is artifact-integrity-failed. Manifests, indexes and
// configs over MaxManifestSize, and blobs over the configured cap
// (WithMaxBlobSize), are refused (artifact-refused) from the size their
// descriptor or Content-Length announces, before their bytes are read.
// Unknown manifest, config or module-layer media types are artifact-refused;
// a missing module, tag, repository or an unreachable registry is
// artifact-unavailable; the caller's deadline and cancellation surface as
// deadline-exceeded and cancelled.
//
// # Cache
//
// Blobs are cached by digest under the cache directory (mode 0700; one
// writable by other users or owned by another user is refused). A blob is
// written to a temporary file, fsynced, verified and only then renamed into
// place, so a crash never leaves a partial file under a final name, and
// several processes may share the directory. Cached blobs are verified
// again whenever read; one that fails is removed and fetched again.
//
// # Registries
//
// OCI keeps one long-lived client per registry (one auth handshake, token
// reuse, one connection pool). Credentials come from the docker config
// keychain (authn.DefaultKeychain: ~/.docker/config.json, DOCKER_CONFIG and
// credential helpers), anonymous when absent. TLS is required except for
// registries named with WithInsecureRegistries, which must be loopback.
// Idempotent requests are retried with exponential backoff on 429, 5xx
// and dropped connections (Retry-After honoured, never past the deadline);
// an interrupted blob download restarts.
//
// OCI also pushes (Push: a CNCF Wasm artifact to a registry or a layout
// directory, see BuildArtifact), pulls (Pull) and inspects (Inspect).
package artifact
