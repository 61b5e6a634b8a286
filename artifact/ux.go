package artifact

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandboxd/toolerr"
)

// ExportedModule is one module written by Export.
type ExportedModule struct {
	Title string `json:"title"`
	Path  string `json:"path"`
	Size  int64  `json:"size"`
}

// Export resolves every module of a Wasm-layout artifact (verified, and
// signature-checked when verify keys are set) and writes each to dir under
// its title (an untitled single module as module.wasm). Titles that are
// not safe relative paths are refused (see CheckTitle).
func (o *OCI) Export(ctx context.Context, imageRef, dir string) (*Artifact, []ExportedModule, error) {
	art, err := o.Pull(ctx, imageRef)
	if err != nil {
		return nil, nil, err
	}
	if art.Layout != LayoutWasm {
		return nil, nil, toolerr.New(toolerr.ArtifactRefused, "%s is an image: its modules are files in its layers; run it by modulePath instead of exporting it", imageRef)
	}
	var titles []string
	for _, l := range art.Layers {
		if isWasmLayer(l.MediaType) {
			t := l.Title
			if t == "" {
				t = "module.wasm"
			}
			titles = append(titles, t)
		}
	}
	if len(titles) == 0 {
		return nil, nil, toolerr.New(toolerr.ArtifactUnavailable, "%s has no Wasm layer", imageRef)
	}
	var out []ExportedModule
	for _, t := range titles {
		if err := CheckTitle(t); err != nil {
			return nil, nil, err
		}
		m, err := o.Resolve(ctx, Ref{Kind: KindOCI, ImageRef: art.Ref, ModulePath: t})
		if err != nil {
			return nil, nil, err
		}
		p := filepath.Join(dir, filepath.FromSlash(cleanPath(t)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write the module")
		}
		if err := atomicWrite(p, m.Bytes); err != nil {
			return nil, nil, err
		}
		out = append(out, ExportedModule{Title: t, Path: p, Size: int64(len(m.Bytes))})
	}
	return art, out, nil
}

// Tag points more tags of imageRef's repository at the manifest imageRef
// names (an index is tagged as it is) and returns the digest-pinned
// reference ("registry/repo@sha256:…").
func (o *OCI) Tag(ctx context.Context, imageRef string, tags ...string) (string, error) {
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return "", err
	}
	if r.layout != "" {
		return "", toolerr.New(toolerr.ArtifactRefused, "tag works on registry references, not %s", imageRef)
	}
	src, err := o.source(r)
	if err != nil {
		return "", err
	}
	d, size := r.digest, int64(-1)
	if !r.pinned() {
		if d, size, err = src.resolveTag(ctx, r.tag); err != nil {
			return "", err
		}
	}
	raw, err := src.manifest(ctx, d, size)
	if err != nil {
		return "", err
	}
	doc, err := parseManifest(raw, d)
	if err != nil {
		return "", err
	}
	up, err := o.newUploader(ctx, r.repo)
	if err != nil {
		return "", err
	}
	for _, t := range tags {
		if err := checkTag(r.repo, t); err != nil {
			return "", err
		}
		if err := up.manifest(ctx, t, doc.MediaType, raw); err != nil {
			return "", err
		}
	}
	return r.canonical(d), nil
}

// Copy copies the image manifest src names (following an index to the
// manifest it would run) with its config and layers to dst, a registry
// tag, and returns the copy's digest-pinned reference. Blobs go through
// the cache, each verified.
func (o *OCI) Copy(ctx context.Context, src, dst string) (*Artifact, error) {
	art, err := o.Pull(ctx, src)
	if err != nil {
		return nil, err
	}
	r, err := parseImageRef(src, o.insecure)
	if err != nil {
		return nil, err
	}
	dr, err := parseImageRef(dst, o.insecure)
	if err != nil {
		return nil, err
	}
	if dr.layout != "" || dr.pinned() {
		return nil, toolerr.New(toolerr.ArtifactRefused, "copy to a registry tag (registry/repo:tag), not %s", dst)
	}
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	up, err := o.newUploader(ctx, dr.repo)
	if err != nil {
		return nil, err
	}
	for _, l := range append([]descriptor{*op.doc.Config}, op.doc.Layers...) {
		b, err := o.readBlob(ctx, op.src, l)
		if err != nil {
			return nil, err
		}
		if err := up.blob(ctx, l.Digest, b, nil); err != nil {
			return nil, err
		}
	}
	if err := up.manifest(ctx, dr.tag, op.doc.MediaType, op.raw); err != nil {
		return nil, err
	}
	cp := *art
	cp.Ref = dr.canonical(art.Digest)
	cp.Index = ""
	return &cp, nil
}

// Login checks user and password against registry (a GET /v2/ with them)
// and stores them in the docker config file (DOCKER_CONFIG/config.json or
// ~/.docker/config.json, created mode 0600), as `docker login` and `oras
// login` do; other entries are kept. It returns the file written.
func (o *OCI) Login(ctx context.Context, registry, user, password string) (string, error) {
	reg, err := name.NewRegistry(registry, name.WeakValidation)
	if err != nil {
		return "", toolerr.Wrap(toolerr.ArtifactUnavailable, err, "invalid registry")
	}
	if o.insecure[registry] {
		reg, _ = name.NewRegistry(registry, name.Insecure)
	}
	ai := authInfo{registry: registry}
	step := "logging in to " + registry
	auth := authn.FromConfig(authn.AuthConfig{Username: user, Password: password})
	hctx, cancel := context.WithTimeoutCause(ctx, o.cfg.requestTimeout, &stepTimeout{step: step, d: o.cfg.requestTimeout})
	defer cancel()
	tr, err := transport.NewWithContext(hctx, reg, auth, o.pullTransport, nil)
	if err != nil {
		return "", registryError(hctx, err, step, ai, 0)
	}
	req, _ := http.NewRequestWithContext(hctx, http.MethodGet, fmt.Sprintf("%s://%s/v2/", reg.Scheme(), reg.RegistryStr()), nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", registryError(hctx, err, step, ai, 0)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return "", toolerr.New(toolerr.ArtifactUnavailable, "%s: %s rejected user %q (wrong user name or password)", step, registry, user)
	}
	if resp.StatusCode != http.StatusOK {
		return "", toolerr.New(toolerr.ArtifactUnavailable, "%s: the registry answered %d", step, resp.StatusCode)
	}
	return editDockerConfig(func(auths map[string]any) {
		auths[registry] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password))}
	})
}

// Logout removes registry's entry from the docker config file. It reports
// whether there was one.
func Logout(registry string) (string, bool, error) {
	had := false
	p, err := editDockerConfig(func(auths map[string]any) {
		_, had = auths[registry]
		delete(auths, registry)
	})
	return p, had, err
}

// editDockerConfig rewrites the "auths" of the docker config file with
// edit, keeping every other key, through a temporary file and a rename.
func editDockerConfig(edit func(auths map[string]any)) (string, error) {
	p := dockerConfigPath()
	cfg := map[string]any{}
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return p, toolerr.New(toolerr.ArtifactRefused, "the docker config %s is not JSON; not touching it", p)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return p, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read the docker config")
	}
	auths, _ := cfg["auths"].(map[string]any)
	if auths == nil {
		auths = map[string]any{}
	}
	edit(auths)
	cfg["auths"] = auths
	b, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return p, toolerr.Wrap(toolerr.Internal, err, "")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return p, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write the docker config")
	}
	return p, atomicWriteMode(p, append(b, '\n'), 0o600)
}

// Tags lists the tags of repository repo (registry/repo), sorted,
// following the registry's pagination (Link headers), at most maxTags.
func (o *OCI) Tags(ctx context.Context, repo string) ([]string, error) {
	const maxTags = 100000
	r, err := parseImageRef(repo+":latest", o.insecure)
	if err != nil || r.layout != "" {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "invalid repository %q", repo)
	}
	src, err := o.source(r)
	if err != nil {
		return nil, err
	}
	rs := src.(*remoteSource)
	var tags []string
	next := rs.url("tags", "list?n=1000")
	for next != "" && len(tags) < maxTags {
		resp, err := rs.do(ctx, http.MethodGet, next, "application/json", "listing the tags of "+r.repo.Name())
		if err != nil {
			return nil, err
		}
		var page struct {
			Tags []string `json:"tags"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, MaxManifestSize)).Decode(&page)
		link := resp.Header.Get("Link")
		base := resp.Request.URL
		resp.Body.Close()
		if err != nil {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "listing the tags of %s: the registry sent no tag list", r.repo.Name())
		}
		tags = append(tags, page.Tags...)
		next = ""
		if i, j := strings.Index(link, "<"), strings.Index(link, ">"); i >= 0 && j > i {
			if u, err := base.Parse(link[i+1 : j]); err == nil && u.Host == base.Host {
				next = u.String()
			}
		}
	}
	sort.Strings(tags)
	return tags, nil
}
