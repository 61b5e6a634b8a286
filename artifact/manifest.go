package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/toolerr"
)

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
