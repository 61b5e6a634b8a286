package artifact

// Media types and annotations of the layouts sandboxd reads and writes.
// See https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/
// and https://github.com/opencontainers/image-spec/blob/main/annotations.md.
const (
	// MediaTypeWasmConfig is the config of a CNCF Wasm OCI artifact.
	MediaTypeWasmConfig = "application/vnd.wasm.config.v0+json"
	// MediaTypeWasmLayer is a CNCF Wasm artifact layer: the module itself.
	MediaTypeWasmLayer = "application/wasm"
	// MediaTypeWasmContentLayer is the older wasm-to-oci layer type, accepted on read.
	MediaTypeWasmContentLayer = "application/vnd.wasm.content.layer.v1+wasm"
	// MediaTypeWasmConfigV1 is the config wasm-to-oci writes, accepted on read.
	MediaTypeWasmConfigV1 = "application/vnd.wasm.config.v1+json"

	// AnnotationTitle names a layer's file: the modulePath it provides.
	AnnotationTitle = "org.opencontainers.image.title"
	// AnnotationVersion on a manifest must equal the ref's artifactVersion.
	AnnotationVersion = "org.opencontainers.image.version"
	// AnnotationRefName tags a manifest in an OCI layout's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"

	mediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"

	mediaTypeOCIConfig    = "application/vnd.oci.image.config.v1+json"
	mediaTypeDockerConfig = "application/vnd.docker.container.image.v1+json"
	mediaTypeOCIEmpty     = "application/vnd.oci.empty.v1+json"

	mediaTypeOCILayer         = "application/vnd.oci.image.layer.v1.tar"
	mediaTypeOCILayerGzip     = "application/vnd.oci.image.layer.v1.tar+gzip"
	mediaTypeOCILayerNDGzip   = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
	mediaTypeOCILayerND       = "application/vnd.oci.image.layer.nondistributable.v1.tar"
	mediaTypeOCILayerZstd     = "application/vnd.oci.image.layer.v1.tar+zstd"
	mediaTypeOCILayerNDZstd   = "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
	mediaTypeDockerLayer      = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	mediaTypeDockerLayerPlain = "application/vnd.docker.image.rootfs.diff.tar"
)

// manifestAccept is the Accept header of manifest requests.
var manifestAccept = mediaTypeOCIManifest + ", " + mediaTypeOCIIndex + ", " + mediaTypeDockerManifest + ", " + mediaTypeDockerList

func isWasmLayer(mt string) bool {
	return mt == MediaTypeWasmLayer || mt == MediaTypeWasmContentLayer
}

// Compressions of tar layers.
const (
	compNone = ""
	compGzip = "gzip"
	compZstd = "zstd"
)

// tarLayer reports whether mt is a tar layer and how it is compressed.
func tarLayer(mt string) (isTar bool, compression string) {
	switch mt {
	case mediaTypeOCILayer, mediaTypeOCILayerND, mediaTypeDockerLayerPlain:
		return true, compNone
	case mediaTypeOCILayerGzip, mediaTypeOCILayerNDGzip, mediaTypeDockerLayer:
		return true, compGzip
	case mediaTypeOCILayerZstd, mediaTypeOCILayerNDZstd:
		return true, compZstd
	}
	return false, compNone
}

// isWasmConfig reports whether mt is the config of a Wasm-layout artifact:
// the CNCF config, wasm-to-oci's, or the OCI empty config (ORAS 1.1
// artifacts, which name the layout in artifactType instead).
func isWasmConfig(mt string) bool {
	return mt == MediaTypeWasmConfig || mt == MediaTypeWasmConfigV1 || mt == mediaTypeOCIEmpty
}

func isIndex(mt string) bool { return mt == mediaTypeOCIIndex || mt == mediaTypeDockerList }

func isImageManifest(mt string) bool {
	return mt == mediaTypeOCIManifest || mt == mediaTypeDockerManifest
}
