package pack

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ImageSource reads a pack index carried in an OCI image
// (artifact.OCI.OpenPackImage): the same tools and checks as IndexSource,
// with every path inside the image.
//
// The index is index.json in the image's pack directory (Image.Root: the
// artifact's top level for a file-layer artifact, /app for a container
// image). ModuleRoot and BundleMap, when given, are paths inside the
// image: absolute from the image root, relative from the pack directory
// (as Kindgi's image runs `--module-root ./dist` from /app). When
// ModuleRoot is "", it is the pack directory's dist/ if every modulePath
// and checkModulePath of the index resolves there (through the bundle map
// found for it), else the pack directory itself. When BundleMap is "", it
// is bundle-map.json in the module root, else in the pack directory, else
// none.
//
// Pinned says the image was named by digest. DESIGN's strict rule ("OCI
// refs must be pinned by digest") applies to the image: when Pinned is
// false, every tool and check of the strict posture is a problem
// (artifact-refused) naming the ref to pin.
type ImageSource struct {
	Image      *artifact.PackImage
	Ref        string // the reference as given, for problems
	Pinned     bool
	ModuleRoot string
	BundleMap  string
	// Verify is IndexSource.Verify.
	Verify func(index []byte) error
}

// imageFiles is a module root inside a pack image.
type imageFiles struct {
	fsys  fs.FS
	dir   string // slash path from the image root ("." for the root)
	label string // "oci://REF"
}

func (f imageFiles) name(n string) string { return path.Join(f.dir, n) }

func (f imageFiles) read(name string, max int64) ([]byte, error) {
	file, err := f.fsys.Open(f.name(name))
	if err != nil {
		if te := asRefusal(err); te != nil {
			return nil, te
		}
		return nil, errors.Unwrap(err)
	}
	defer file.Close()
	if st, err := file.Stat(); err == nil && st.Size() > max {
		return nil, fmt.Errorf("%d bytes, over the %d-byte cap", st.Size(), max)
	}
	return io.ReadAll(file)
}

func (f imageFiles) where(name string) string { return f.label + "#/" + f.name(name) }

// IndexIn is the slash path of the index inside a pack image.
func IndexIn(img *artifact.PackImage) string { return path.Join(img.Root, "index.json") }

// inImage makes p, a path given for the image, a slash path from the image
// root: absolute from the root, relative from dir.
func inImage(dir, p string) (string, error) {
	if strings.Contains(p, "\\") {
		return "", fmt.Errorf("%q: paths inside an image use forward slashes", p)
	}
	var out string
	if strings.HasPrefix(p, "/") {
		out = path.Clean(strings.TrimLeft(p, "/"))
	} else {
		out = path.Join(dir, p)
	}
	if out == "" || !fs.ValidPath(out) {
		return "", fmt.Errorf("%q leaves the image", p)
	}
	return out, nil
}

// Read reads the index and its modules from the image (see IndexSource.Read
// for the Pack and problems). Problem paths name files as oci://REF#/path.
func (s ImageSource) Read() (*Pack, []Problem) {
	label := "oci://" + s.Ref
	fsys := s.Image.FS()
	indexName := IndexIn(s.Image)
	indexLabel := label + "#/" + indexName
	srcProblem := func(code toolerr.Code, format string, args ...any) (*Pack, []Problem) {
		return nil, []Problem{{Path: indexLabel, Code: code, Message: fmt.Sprintf(format, args...)}}
	}
	b, err := fs.ReadFile(fsys, indexName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		where := "a layer titled index.json"
		if s.Image.Layout == artifact.PackTar {
			where = "/" + indexName
		}
		return srcProblem(toolerr.ArtifactUnavailable, "%s carries no pack index: it has no %s", s.Image.Artifact.Ref, where)
	case err != nil:
		if te := asRefusal(err); te != nil {
			return srcProblem(te.Code, "%s", te.Message)
		}
		return srcProblem(toolerr.ArtifactUnavailable, "cannot read the pack index: %v", err)
	case int64(len(b)) > MaxFileBytes:
		return srcProblem(toolerr.ArtifactRefused, "the pack index is %d bytes, over the %d-byte cap", len(b), MaxFileBytes)
	}
	if s.Verify != nil {
		if p := verifyIndex(s.Verify, b, indexLabel); p != nil {
			return nil, []Problem{*p}
		}
	}
	ix, err := ParseIndex(b)
	if err != nil {
		return srcProblem("", "%v", err)
	}
	dir := s.Image.Root
	var roots []string
	if s.ModuleRoot != "" {
		r, err := inImage(dir, s.ModuleRoot)
		if err != nil {
			return srcProblem(toolerr.InvalidToolDefinition, "--module-root %v", err)
		}
		roots = []string{r}
	} else {
		roots = []string{path.Join(dir, "dist"), dir}
	}
	var explicitMap string
	if s.BundleMap != "" {
		if explicitMap, err = inImage(dir, s.BundleMap); err != nil {
			return srcProblem(toolerr.InvalidToolDefinition, "--bundle-map %v", err)
		}
	}
	// The first candidate root every entry resolves under wins; the last
	// one is used (and its problems reported) when none does.
	var p *Pack
	var problems []Problem
	for i, root := range roots {
		bm, bp := s.bundleMap(fsys, explicitMap, root, dir, label)
		if bp != nil {
			if i < len(roots)-1 {
				continue
			}
			return nil, []Problem{*bp}
		}
		files := imageFiles{fsys: fsys, dir: root, label: label}
		if i < len(roots)-1 && !resolvesAll(ix, files, bm) {
			continue
		}
		p, problems = readEntries(ix, indexLabel, files, bm)
		break
	}
	if !s.Pinned {
		problems = append(problems, strictUnpinned(p, s.Ref)...)
	}
	return p, problems
}

// bundleMap reads the bundle map for module root root: the explicit one,
// else root/bundle-map.json, else dir/bundle-map.json, else none.
func (s ImageSource) bundleMap(fsys fs.FS, explicit, root, dir, label string) (BundleMap, *Problem) {
	cands := []string{path.Join(root, "bundle-map.json"), path.Join(dir, "bundle-map.json")}
	if explicit != "" {
		cands = []string{explicit}
	}
	for _, c := range cands {
		b, err := fs.ReadFile(fsys, c)
		if errors.Is(err, fs.ErrNotExist) && explicit == "" {
			continue
		}
		where := label + "#/" + c
		if err != nil {
			code := toolerr.ArtifactUnavailable
			if te := asRefusal(err); te != nil {
				code = te.Code
			}
			return nil, &Problem{Path: where, Code: code, Message: fmt.Sprintf("bundle map: %v", errors.Unwrap(err))}
		}
		bm, err := ParseBundleMap(b)
		if err != nil {
			return nil, &Problem{Path: where, Code: toolerr.InvalidToolDefinition, Message: err.Error()}
		}
		return bm, nil
	}
	return nil, nil
}

// resolvesAll reports whether every module the index names has a
// candidate file under files.
func resolvesAll(ix *Index, files imageFiles, bm BundleMap) bool {
	paths := make([]string, 0, len(ix.Tools)+len(ix.Guardrails))
	for _, t := range ix.Tools {
		if t.ModulePath != "" {
			paths = append(paths, t.ModulePath)
		}
	}
	for _, g := range ix.Guardrails {
		paths = append(paths, g.CheckModulePath)
	}
	if len(paths) == 0 {
		return false
	}
	for _, mp := range paths {
		cands, err := ModuleCandidates(mp, bm)
		if err != nil {
			return false
		}
		found := false
		for _, c := range cands {
			// A file that is there but refused (a symbolic link) resolves:
			// reading it reports the refusal.
			if _, err := fs.Stat(files.fsys, files.name(c)); err == nil || asRefusal(err) != nil {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// strictUnpinned lists the strict-posture tools and checks of a pack read
// from an image named by tag, and drops them from p.
func strictUnpinned(p *Pack, ref string) []Problem {
	if p == nil {
		return nil
	}
	var problems []Problem
	strict := func(man []byte) bool {
		m, err := manifest.Parse(man)
		return err == nil && m.Posture() == manifest.PostureStrict
	}
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	msg := func(what, id string) string {
		return fmt.Sprintf("strict %s %s comes from the pack image %s, named by tag: the code of a strict entry must be pinned by digest (oci://%s@sha256:…)", what, id, ref, repo)
	}
	tools := p.Tools[:0]
	for _, t := range p.Tools {
		if strict(t.Manifest) {
			problems = append(problems, Problem{ID: t.ID, Path: t.Source, Code: toolerr.ArtifactRefused, Message: msg("tool", t.ID)})
			continue
		}
		tools = append(tools, t)
	}
	p.Tools = tools
	checks := p.Checks[:0]
	for _, c := range p.Checks {
		if strict(c.Manifest) {
			problems = append(problems, Problem{ID: c.ID, Path: c.Source, Code: toolerr.ArtifactRefused, Message: msg("check", c.ID)})
			continue
		}
		checks = append(checks, c)
	}
	p.Checks = checks
	return problems
}
