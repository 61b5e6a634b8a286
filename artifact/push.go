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
	// File, when set instead of Wasm, is the path of the module binary (a
	// regular file). A registry push then streams it: it is copied into the
	// cache while it is hashed, and uploaded from that copy with
	// sendfile(2), so it is never held in memory and a file changed
	// meanwhile cannot make the pushed bytes disagree with their digest.
	File string
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
	blobs = map[string][]byte{}
	var layers []pushLayer
	for _, m := range modules {
		if err := checkWasm(m.Title, m.Wasm); err != nil {
			return nil, nil, err
		}
		d := Digest(m.Wasm)
		blobs[d] = m.Wasm
		layers = append(layers, pushLayer{title: m.Title, digest: d, size: int64(len(m.Wasm))})
	}
	cb, manifest, err := buildManifest(version, created, annotations, layers)
	if err != nil {
		return nil, nil, err
	}
	blobs[Digest(cb)] = cb
	return blobs, manifest, nil
}

// pushLayer is one module layer of an artifact being pushed: its bytes
// are in data, or (a File module) in the cache blob at path.
type pushLayer struct {
	title  string
	digest string
	size   int64
	data   []byte
	path   string
}

func checkWasm(title string, head []byte) error {
	if !bytes.HasPrefix(head, []byte("\x00asm")) {
		return toolerr.New(toolerr.ArtifactRefused, "module %q is not a WebAssembly binary", title)
	}
	return nil
}

// buildManifest returns the config and the manifest of a CNCF Wasm OCI
// artifact of layers.
func buildManifest(version string, created time.Time, annotations map[string]string, layers []pushLayer) (config, manifest []byte, err error) {
	if version == "" {
		return nil, nil, toolerr.New(toolerr.ArtifactRefused, "an artifact needs a version (org.opencontainers.image.version)")
	}
	if len(layers) == 0 {
		return nil, nil, toolerr.New(toolerr.ArtifactRefused, "an artifact needs at least one module")
	}
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
	for _, l := range layers {
		if err := CheckTitle(l.title); err != nil {
			return nil, nil, err
		}
		if seen[cleanPath(l.title)] {
			return nil, nil, toolerr.New(toolerr.ArtifactRefused, "two modules are titled %q", l.title)
		}
		seen[cleanPath(l.title)] = true
		cfg.LayerDigests = append(cfg.LayerDigests, l.digest)
		doc.Layers = append(doc.Layers, descriptor{
			MediaType:   MediaTypeWasmLayer,
			Digest:      l.digest,
			Size:        l.size,
			Annotations: map[string]string{AnnotationTitle: l.title},
		})
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, toolerr.Wrap(toolerr.Internal, err, "")
	}
	doc.Config = &descriptor{MediaType: MediaTypeWasmConfig, Digest: Digest(cb), Size: int64(len(cb))}
	manifest, err = json.Marshal(doc)
	if err != nil {
		return nil, nil, toolerr.Wrap(toolerr.Internal, err, "")
	}
	return cb, manifest, nil
}

// Push builds a CNCF Wasm OCI artifact from modules (see BuildArtifact) and
// pushes it to imageRef, a registry tag ("registry/repo:tag") or an OCI
// layout ("oci-layout:dir[:tag]", created when absent). A registry push also
// fills the local cache, so the pushing host resolves the artifact offline.
// WithTags names more tags of a registry target's repository for the
// manifest. It returns the pushed artifact; its Ref is the digest-pinned
// reference.
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
	if len(co.tags) > 0 && r.layout != "" {
		return nil, toolerr.New(toolerr.ArtifactRefused, "more tags work on registry references, not %s", imageRef)
	}
	for _, t := range co.tags {
		if err := checkTag(r.repo, t); err != nil {
			return nil, err
		}
	}
	if err := o.checkPush(version, co.annotations, modules); err != nil {
		return nil, err
	}
	created := DefaultCreated
	if !co.created.IsZero() {
		created = co.created
	}
	var manifest []byte
	if r.layout != "" {
		mods := make([]PushModule, len(modules))
		for i, m := range modules {
			if mods[i], err = o.loadModule(m); err != nil {
				return nil, err
			}
		}
		blobs, mf, err := buildArtifact(version, created, co.annotations, mods)
		if err != nil {
			return nil, err
		}
		if err := writeLayout(r.layout, r.tag, blobs, mf, mediaTypeOCIManifest); err != nil {
			return nil, err
		}
		for d, b := range blobs {
			if co.progress != nil {
				co.progress(Progress{Digest: d, Done: int64(len(b)), Total: int64(len(b))})
			}
		}
		manifest = mf
	} else if manifest, err = o.pushRegistry(ctx, r, version, created, modules, &co); err != nil {
		return nil, err
	}
	md := Digest(manifest)
	doc, err := parseManifest(manifest, md)
	if err != nil {
		return nil, err
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

// checkPush refuses, before anything is read or sent, what buildManifest
// would refuse: no version or modules, a contradicting version
// annotation, unsafe or duplicate titles, in-memory modules over the cap.
func (o *OCI) checkPush(version string, annotations map[string]string, modules []PushModule) error {
	if version == "" {
		return toolerr.New(toolerr.ArtifactRefused, "an artifact needs a version (org.opencontainers.image.version)")
	}
	if len(modules) == 0 {
		return toolerr.New(toolerr.ArtifactRefused, "an artifact needs at least one module")
	}
	if v, ok := annotations[AnnotationVersion]; ok && v != version {
		return toolerr.New(toolerr.ArtifactRefused, "annotation %s=%s contradicts the artifact version %s", AnnotationVersion, v, version)
	}
	seen := map[string]bool{}
	for _, m := range modules {
		if err := CheckTitle(m.Title); err != nil {
			return err
		}
		if seen[cleanPath(m.Title)] {
			return toolerr.New(toolerr.ArtifactRefused, "two modules are titled %q", m.Title)
		}
		seen[cleanPath(m.Title)] = true
		if int64(len(m.Wasm)) > o.cfg.maxBlob {
			return toolerr.New(toolerr.ArtifactRefused, "module %q is %d bytes, over the %d-byte cap", m.Title, len(m.Wasm), o.cfg.maxBlob)
		}
	}
	return nil
}

// loadModule returns m with its bytes in memory (a File module is read).
func (o *OCI) loadModule(m PushModule) (PushModule, error) {
	if m.File == "" {
		return m, nil
	}
	b, err := ReadRegular(m.File, o.cfg.maxBlob)
	if err != nil {
		return m, err
	}
	return PushModule{Title: m.Title, Wasm: b}, nil
}

// stageModule hashes module m into a pushLayer: a File module is copied
// into the cache c while it is hashed (read into memory when c is nil).
func (o *OCI) stageModule(c *cache, m PushModule) (pushLayer, error) {
	if m.File != "" && c != nil {
		d, size, path, head, err := c.importFile(m.File, o.cfg.maxBlob)
		if err != nil {
			return pushLayer{}, err
		}
		return pushLayer{title: m.Title, digest: d, size: size, path: path}, checkWasm(m.Title, head)
	}
	m, err := o.loadModule(m)
	if err != nil {
		return pushLayer{}, err
	}
	return pushLayer{title: m.Title, digest: Digest(m.Wasm), size: int64(len(m.Wasm)), data: m.Wasm}, checkWasm(m.Title, m.Wasm)
}

// pushRegistry pushes the artifact of modules to a registry and returns
// its manifest. The auth handshake runs while the modules are hashed;
// each module's blob uploads as soon as it is hashed (at most
// cfg.concurrency at once), the config as soon as every module is; the
// manifest goes last, under r's tag and then co.tags. File modules are hashed into the cache and uploaded
// from there; in-memory ones are copied into the cache while they upload.
func (o *OCI) pushRegistry(ctx context.Context, r *imageRef, version string, created time.Time, modules []PushModule, co *callOptions) ([]byte, error) {
	c, err := o.openCache()
	if err != nil {
		c = nil // push without filling the cache
	}
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var up *uploader
	var upErr error
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		up, upErr = o.newUploader(uctx, r.repo)
	}()
	uploader := func() (*uploader, error) {
		<-upDone
		return up, upErr
	}
	var pmu sync.Mutex
	progressFn := func(d string, total int64) func(int64) {
		if co.progress == nil {
			return nil
		}
		fn := func(n int64) {
			pmu.Lock()
			defer pmu.Unlock()
			co.progress(Progress{Digest: d, Done: n, Total: total})
		}
		fn(0)
		return fn
	}
	layers := make([]pushLayer, len(modules))
	errs := make([]error, len(modules)+1)
	fail := func(i int, err error) {
		errs[i] = err
		cancel()
	}
	sem := make(chan struct{}, o.cfg.concurrency)
	var staged, all, caching sync.WaitGroup
	defer caching.Wait()
	for i, m := range modules {
		staged.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			stagedDone := sync.OnceFunc(staged.Done)
			defer stagedDone()
			select {
			case sem <- struct{}{}:
			case <-uctx.Done():
				errs[i] = uctx.Err()
				return
			}
			defer func() { <-sem }()
			l, err := o.stageModule(c, m)
			if err != nil {
				fail(i, err)
				return
			}
			layers[i] = l
			stagedDone()
			if l.data != nil && c != nil {
				caching.Add(1)
				go func() {
					defer caching.Done()
					_ = c.putBytes(l.digest, l.data)
				}()
			}
			u, err := uploader()
			if err != nil {
				fail(i, err)
				return
			}
			fn := progressFn(l.digest, l.size)
			if err := u.upload(uctx, l, fn); err != nil {
				fail(i, err)
				return
			}
			if fn != nil {
				fn(l.size)
			}
		}()
	}
	var config, manifest []byte
	all.Add(1)
	go func() {
		defer all.Done()
		staged.Wait()
		if uctx.Err() != nil {
			return
		}
		cb, mf, err := buildManifest(version, created, co.annotations, layers)
		if err != nil {
			fail(len(modules), err)
			return
		}
		config, manifest = cb, mf
		u, err := uploader()
		if err != nil {
			fail(len(modules), err)
			return
		}
		cl := pushLayer{digest: Digest(cb), size: int64(len(cb)), data: cb}
		fn := progressFn(cl.digest, cl.size)
		if err := u.upload(uctx, cl, fn); err != nil {
			fail(len(modules), err)
			return
		}
		if fn != nil {
			fn(cl.size)
		}
	}()
	all.Wait()
	for _, err := range errs {
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			cancel()
			<-upDone
			return nil, err
		}
	}
	cancel()
	<-upDone
	for _, err := range errs {
		if err != nil {
			ai := authInfo{registry: r.repo.RegistryStr(), push: true}
			if up != nil {
				ai = up.auth
			}
			return nil, registryError(ctx, err, "pushing to "+r.repo.Name(), ai, 0)
		}
	}
	for _, t := range append([]string{r.tag}, co.tags...) {
		if err := up.manifest(ctx, t, mediaTypeOCIManifest, manifest); err != nil {
			return nil, err
		}
	}
	if c != nil {
		_ = c.putBytes(Digest(config), config)
		_ = c.putBytes(Digest(manifest), manifest)
	}
	return manifest, nil
}
