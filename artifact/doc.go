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
// sha256 and sha512 digests are accepted. DigestPinned tells pinned refs apart;
// the executor refuses an unpinned imageRef for a strict tool
// (artifact-refused).
//
// # Layouts
//
// The CNCF Wasm OCI artifact (config MediaTypeWasmConfig, wasm-to-oci's
// MediaTypeWasmConfigV1, or the OCI empty config of ORAS 1.1 artifacts;
// each module one layer of MediaTypeWasmLayer or MediaTypeWasmContentLayer,
// named by its org.opencontainers.image.title annotation, which modulePath
// must equal — or, for an artifact whose one Wasm layer is untitled, as
// oci-wasm, wkg and wash push, any modulePath), and ordinary images (config
// application/vnd.oci.image.config.v1+json or the Docker equivalent) whose
// tar, tar+gzip or tar+zstd layers contain modulePath as a regular file;
// the top layer wins and whiteouts delete. A Wasm config's architecture
// and os are checked: wasm/wasip1 runs, wasip2 components are refused (so
// is a component binary). An image index is followed to its only manifest,
// or ranked by platform (from the descriptor, or else from each entry's
// config): wasip1 first, components never. Several modules per artifact
// work in both layouts. See
// https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/.
//
// # Integrity and caps
//
// The artifact's version — the manifest's org.opencontainers.image.version
// annotation, else its index's, else the image config's label of that name
// — must equal artifactVersion (artifact-integrity-failed naming both); an
// artifact with none is artifact-refused. With WithVerifyKeys it must also
// carry a cosign key-based signature (see verifySignatures). Every manifest
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
// an interrupted blob download restarts. Every request has its own
// deadline (WithRequestTimeout) and fails naming its step; private CAs come
// from WithRegistryCA and the docker certs directory.
//
// OCI also pushes (Push: a CNCF Wasm artifact to a registry or a layout
// directory, see BuildArtifact), pulls (Pull) and inspects (Inspect).
package artifact
