package artifact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// PushModule is one module of an artifact to push.
type PushModule struct {
	// Title is the layer's org.opencontainers.image.title: the modulePath
	// a codeArtifactRef names it by.
	Title string
	// Wasm is the module binary.
	Wasm []byte
}

// wasmConfig is the CNCF Wasm artifact config
// (application/vnd.wasm.config.v0+json).
type wasmConfig struct {
	Created      string   `json:"created"`
	Architecture string   `json:"architecture"`
	OS           string   `json:"os"`
	LayerDigests []string `json:"layerDigests"`
}

// DefaultCreated is the config's created time when none is given: the Unix
// epoch, as reproducible builds write it, so the same inputs give the same
// digest.
var DefaultCreated = time.Unix(0, 0).UTC()

// BuildArtifact returns the blobs (by digest) and manifest of a CNCF Wasm
// OCI artifact holding modules, annotated with version, created at
// DefaultCreated. The bytes depend only on the inputs, so pushing the same
// modules twice gives one digest.
func BuildArtifact(version string, modules []PushModule) (blobs map[string][]byte, manifest []byte, err error) {
	return buildArtifact(version, DefaultCreated, nil, modules)
}

// CheckTitle refuses a module title that is not a safe relative path
// (clients such as ORAS write layers to files named by their title):
// empty, absolute, with a ".." element, a backslash or a control character.
func CheckTitle(title string) error {
	switch {
	case title == "":
		return toolerr.New(toolerr.ArtifactRefused, "a module has no title")
	case strings.HasPrefix(title, "/"):
		return toolerr.New(toolerr.ArtifactRefused, "module title %q is an absolute path; titles are relative paths (the modulePath)", title)
	case strings.ContainsAny(title, "\\"):
		return toolerr.New(toolerr.ArtifactRefused, "module title %q contains a backslash", title)
	case strings.IndexFunc(title, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return toolerr.New(toolerr.ArtifactRefused, "module title %q contains a control character", title)
	}
	for _, el := range strings.Split(title, "/") {
		if el == ".." {
			return toolerr.New(toolerr.ArtifactRefused, "module title %q leaves its directory (a \"..\" element); pullers refuse it as path traversal", title)
		}
	}
	return nil
}

func buildArtifact(version string, created time.Time, annotations map[string]string, modules []PushModule) (blobs map[string][]byte, manifest []byte, err error) {
	if version == "" {
		return nil, nil, toolerr.New(toolerr.ArtifactRefused, "an artifact needs a version (org.opencontainers.image.version)")
	}
	if len(modules) == 0 {
		return nil, nil, toolerr.New(toolerr.ArtifactRefused, "an artifact needs at least one module")
	}
	blobs = map[string][]byte{}
	seen := map[string]bool{}
	doc := manifestDoc{
		SchemaVersion: 2,
		MediaType:     mediaTypeOCIManifest,
		Annotations:   map[string]string{AnnotationVersion: version},
	}
	for k, v := range annotations {
		if k == AnnotationVersion && v != version {
			return nil, nil, toolerr.New(toolerr.ArtifactRefused, "annotation %s=%s contradicts the artifact version %s", k, v, version)
		}
		doc.Annotations[k] = v
	}
	var cfg wasmConfig
	cfg.Created = created.UTC().Format(time.RFC3339)
	cfg.Architecture, cfg.OS = "wasm", "wasip1"
	for _, m := range modules {
		if err := CheckTitle(m.Title); err != nil {
			return nil, nil, err
		}
		if seen[cleanPath(m.Title)] {
			return nil, nil, toolerr.New(toolerr.ArtifactRefused, "two modules are titled %q", m.Title)
		}
		seen[cleanPath(m.Title)] = true
		if !bytes.HasPrefix(m.Wasm, []byte("\x00asm")) {
			return nil, nil, toolerr.New(toolerr.ArtifactRefused, "module %q is not a WebAssembly binary", m.Title)
		}
		d := Digest(m.Wasm)
		blobs[d] = m.Wasm
		cfg.LayerDigests = append(cfg.LayerDigests, d)
		doc.Layers = append(doc.Layers, descriptor{
			MediaType:   MediaTypeWasmLayer,
			Digest:      d,
			Size:        int64(len(m.Wasm)),
			Annotations: map[string]string{AnnotationTitle: m.Title},
		})
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, toolerr.Wrap(toolerr.Internal, err, "")
	}
	cd := Digest(cb)
	blobs[cd] = cb
	doc.Config = &descriptor{MediaType: MediaTypeWasmConfig, Digest: cd, Size: int64(len(cb))}
	manifest, err = json.Marshal(doc)
	if err != nil {
		return nil, nil, toolerr.Wrap(toolerr.Internal, err, "")
	}
	return blobs, manifest, nil
}

// Push builds a CNCF Wasm OCI artifact from modules (see BuildArtifact) and
// pushes it to imageRef, a registry tag ("registry/repo:tag") or an OCI
// layout ("oci-layout:dir[:tag]", created when absent). A registry push also
// fills the local cache, so the pushing host resolves the artifact offline.
// It returns the pushed artifact; its Ref is the digest-pinned reference.
func (o *OCI) Push(ctx context.Context, imageRef, version string, modules []PushModule, opts ...CallOption) (*Artifact, error) {
	var co callOptions
	for _, opt := range opts {
		opt(&co)
	}
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	if r.pinned() {
		return nil, toolerr.New(toolerr.ArtifactRefused, "push to a tag, not a digest: %s", imageRef)
	}
	for _, m := range modules {
		if int64(len(m.Wasm)) > o.cfg.maxBlob {
			return nil, toolerr.New(toolerr.ArtifactRefused, "module %q is %d bytes, over the %d-byte cap", m.Title, len(m.Wasm), o.cfg.maxBlob)
		}
	}
	created := DefaultCreated
	if !co.created.IsZero() {
		created = co.created
	}
	blobs, manifest, err := buildArtifact(version, created, co.annotations, modules)
	if err != nil {
		return nil, err
	}
	md := Digest(manifest)
	doc, err := parseManifest(manifest, md)
	if err != nil {
		return nil, err
	}
	report := func(d string, n int64) {
		if co.progress != nil {
			co.progress(Progress{Digest: d, Done: n, Total: n})
		}
	}
	if r.layout != "" {
		if err := writeLayout(r.layout, r.tag, blobs, manifest, mediaTypeOCIManifest); err != nil {
			return nil, err
		}
		for d, b := range blobs {
			report(d, int64(len(b)))
		}
	} else {
		up, err := o.newUploader(ctx, r.repo)
		if err != nil {
			return nil, err
		}
		// The cache is filled while the blobs upload; the blobs upload
		// concurrently, at most cfg.concurrency at once.
		cacheDone := make(chan struct{})
		go func() {
			defer close(cacheDone)
			if c, err := o.openCache(); err == nil {
				for d, b := range blobs {
					_ = c.putBytes(d, b)
				}
				_ = c.putBytes(md, manifest)
			}
		}()
		defer func() { <-cacheDone }()
		var pmu sync.Mutex
		progress := func(p Progress) {
			if co.progress != nil {
				pmu.Lock()
				defer pmu.Unlock()
				co.progress(p)
			}
		}
		order := append([]descriptor{*doc.Config}, doc.Layers...)
		uctx, cancel := context.WithCancel(ctx)
		defer cancel()
		sem := make(chan struct{}, o.cfg.concurrency)
		errs := make([]error, len(order))
		var wg sync.WaitGroup
		for i, l := range order {
			var fn func(int64)
			if co.progress != nil {
				dg, total := l.Digest, l.Size
				fn = func(n int64) { progress(Progress{Digest: dg, Done: n, Total: total}) }
				fn(0)
			}
			select {
			case sem <- struct{}{}:
			case <-uctx.Done():
				errs[i] = uctx.Err()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := up.blob(uctx, l.Digest, blobs[l.Digest], fn); err != nil {
					errs[i] = err
					cancel()
					return
				}
				progress(Progress{Digest: l.Digest, Done: l.Size, Total: l.Size})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				return nil, err
			}
		}
		for _, err := range errs {
			if err != nil {
				return nil, registryError(ctx, err, "pushing to "+r.repo.Name(), up.auth, 0)
			}
		}
		if err := up.manifest(ctx, r.tag, mediaTypeOCIManifest, manifest); err != nil {
			return nil, err
		}
	}
	art := &Artifact{
		Ref:             r.canonical(md),
		Digest:          md,
		MediaType:       mediaTypeOCIManifest,
		ConfigMediaType: MediaTypeWasmConfig,
		Layout:          LayoutWasm,
		Version:         version,
		VersionFrom:     VersionFromManifest,
		Architecture:    "wasm",
		OS:              "wasip1",
		Size:            int64(len(manifest)) + doc.Config.Size,
	}
	for _, l := range doc.Layers {
		art.Layers = append(art.Layers, Layer{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Title: l.Annotations[AnnotationTitle]})
		art.Size += l.Size
	}
	return art, nil
}
