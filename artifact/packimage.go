package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Pack image layouts (PackImage.Layout).
const (
	// PackFiles is an artifact of titled file layers (what `oras push REF
	// index.json tools/echo.wasm` and `sandboxd push-pack` make): each layer
	// is one file, named by its org.opencontainers.image.title (or an ORAS
	// directory layer). Root is ".".
	PackFiles = "files"
	// PackTar is a container image whose tar layers hold the pack under
	// /app (Kindgi's image shape; crane append): Root is "app".
	PackTar = "tar"
)

// PackImageRoot is the directory of a container image (PackTar) that holds
// a pack: /app, where Kindgi's image keeps index.json and dist/.
const PackImageRoot = "app"

// annotationORASUnpack marks a layer ORAS made of a directory (a tar of
// it, unpacked on pull).
const annotationORASUnpack = "io.deis.oras.content.unpack"

// maxPackEntries caps the tar entries read from one pack image.
const maxPackEntries = 1 << 20

// PackImage is the files of an OCI image that carries a pack, read into
// memory from blobs verified against their digests. Only regular files are
// kept; nothing is written to disk by an entry's name, so no entry can
// reach outside the image. A PackImage is immutable and safe for
// concurrent use.
type PackImage struct {
	// Artifact describes the image manifest the files come from (its Ref is
	// digest-pinned: the digest actually resolved).
	Artifact Artifact
	// Layout is PackFiles or PackTar.
	Layout string
	// Root is the image directory the pack is in: "." for PackFiles,
	// PackImageRoot for PackTar.
	Root  string
	files map[string]packEntry
	// steps is the work building it took (packTree.steps), for the tests
	// that bound it.
	steps int64
	// ctx, when set (WithContext), stops reading its files.
	ctx context.Context
}

// WithContext returns p reading its files under ctx: once ctx is done,
// every Open, ReadFile and Stat of its FS, and every Read of a file opened
// from it, fails with ctx's error (a *toolerr.Error), so a loader reading
// many files of the image stops with it. p is not changed.
func (p *PackImage) WithContext(ctx context.Context) *PackImage {
	q := *p
	q.ctx = ctx
	return &q
}

// stopped is the error of p's context, once it is done.
func (p *PackImage) stopped() error {
	if p.ctx == nil {
		return nil
	}
	if err := p.ctx.Err(); err != nil {
		return toolerr.As(err)
	}
	return nil
}

type packEntry struct {
	data  []byte
	kind  string // "" for a regular file, else what it is ("a symbolic link")
	layer string // the layer digest it came from
}

// Files lists the regular files under Root, sorted (slash paths from the
// image root).
func (p *PackImage) Files() []string {
	var out []string
	for name, e := range p.files {
		if e.kind == "" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// FS returns the image's files as a read-only file system (slash paths
// from the image root, as fs.ValidPath wants them). Opening anything that
// is not a regular file of the image fails: fs.ErrNotExist when the image
// lacks it, an artifact-refused *toolerr.Error (wrapping fs.ErrInvalid)
// for a symbolic link, hard link, device or FIFO, or a path below one.
// The FS implements fs.ReadFileFS and fs.StatFS.
func (p *PackImage) FS() fs.FS { return packFS{p} }

type packFS struct{ p *PackImage }

func (f packFS) entry(op, name string) (packEntry, error) {
	if err := f.p.stopped(); err != nil {
		return packEntry{}, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if !fs.ValidPath(name) {
		return packEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	// An irregular entry above name (app/dist a symbolic link) refuses it:
	// a runtime unpacking the image would follow it. A regular file above
	// it (one layer holding both app/x and app/x/y) leaves nothing there.
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if e, ok := f.p.files[dir]; ok {
			if e.kind == "" {
				return packEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
			}
			return packEntry{}, &fs.PathError{Op: op, Path: name, Err: f.p.irregular(dir, e)}
		}
	}
	e, ok := f.p.files[name]
	if !ok {
		return packEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if e.kind != "" {
		return packEntry{}, &fs.PathError{Op: op, Path: name, Err: f.p.irregular(name, e)}
	}
	return e, nil
}

// irregularError is why a pack image entry is not read: artifact-refused,
// and fs.ErrInvalid for errors.Is.
type irregularError struct{ te *toolerr.Error }

func (e irregularError) Error() string   { return e.te.Error() }
func (e irregularError) Unwrap() []error { return []error{e.te, fs.ErrInvalid} }

func (p *PackImage) irregular(name string, e packEntry) error {
	return irregularError{toolerr.New(toolerr.ArtifactRefused, "/%s in layer %s of %s is %s: a pack image's files must be regular files", name, e.layer, p.Artifact.Ref, e.kind)}
}

func (f packFS) Open(name string) (fs.File, error) {
	e, err := f.entry("open", name)
	if err != nil {
		return nil, err
	}
	return &packFile{p: f.p, name: path.Base(name), r: bytes.NewReader(e.data), size: int64(len(e.data))}, nil
}

func (f packFS) ReadFile(name string) ([]byte, error) {
	e, err := f.entry("read", name)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), e.data...), nil
}

func (f packFS) Stat(name string) (fs.FileInfo, error) {
	e, err := f.entry("stat", name)
	if err != nil {
		return nil, err
	}
	return packInfo{name: path.Base(name), size: int64(len(e.data))}, nil
}

type packFile struct {
	p    *PackImage
	name string
	r    *bytes.Reader
	size int64
}

func (f *packFile) Stat() (fs.FileInfo, error) { return packInfo{name: f.name, size: f.size}, nil }
func (f *packFile) Read(b []byte) (int, error) {
	if err := f.p.stopped(); err != nil {
		return 0, err
	}
	return f.r.Read(b[:min(len(b), packReadChunk)])
}
func (f *packFile) Close() error { return nil }

// packReadChunk is the most one Read of a pack file copies, so a reader's
// stop is seen between chunks.
const packReadChunk = 1 << 20

type packInfo struct {
	name string
	size int64
}

func (i packInfo) Name() string       { return i.name }
func (i packInfo) Size() int64        { return i.size }
func (i packInfo) Mode() fs.FileMode  { return 0o444 }
func (i packInfo) ModTime() time.Time { return time.Time{} }
func (i packInfo) IsDir() bool        { return false }
func (i packInfo) Sys() any           { return nil }

// OpenPackImage resolves imageRef (a registry reference or an oci-layout:
// ref, by tag or digest) and reads the pack it carries:
//
//   - an artifact whose config is the OCI empty config or a Wasm config
//     (ORAS, sandboxd push-pack) is PackFiles: every layer is one file named
//     by its title (a safe relative path, see CheckTitle), or, marked
//     io.deis.oras.content.unpack (`oras push REF dist/`), a tar of the
//     directory its title names, whose entries must all lie in it; an
//     untitled layer is refused;
//   - an image with an image config is PackTar: its tar, tar+gzip or
//     tar+zstd layers are applied in order (later files win; whiteouts
//     delete, opaque whiteouts hide what lower layers had in a directory)
//     and the regular files under /app are kept. Entries elsewhere are read
//     past (their names still checked).
//
// Every blob is verified against its digest before its bytes are used
// (they come through the artifact cache, so a digest-pinned ref works
// offline once pulled). The files kept are stored in the cache too, each
// a blob by its digest, with a memo of the image's files by its manifest
// digest: opening that manifest again reads them (verified) instead of its
// layers. Refused (artifact-refused): an entry name that is
// absolute after "/" is stripped or has a ".." element, anywhere in the
// image; a file over the blob cap (WithMaxBlobSize); files over four
// times the cap in all; more than 2^20 tar entries; a compressed layer
// unpacking to more than 256 times its size (beyond 64 MiB) or any layer
// past 4 GiB; an entry name over 4096 bytes; a layer over the cap or of
// another media type. Reading is linear in the layers' entries and bytes
// (see applyLayer) and stops with ctx at every stage. A symbolic link,
// hard link, device or FIFO under /app is kept as such and refused when
// read (see FS). Progress is logged as for Resolve (artifact-resolve with
// pack true, artifact-download, artifact-failed), and the result as
// artifact-pack (imageRef, the digest resolved, layout, files).
func (o *OCI) OpenPackImage(ctx context.Context, imageRef string) (*PackImage, error) {
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	o.logInfo("artifact-resolve", "imageRef", imageRef, "pack", true)
	p, err := o.openPackImage(ctx, r)
	if err != nil {
		o.logError("artifact-failed", "imageRef", imageRef, "pack", true, "error", err.Error())
		return nil, err
	}
	o.logInfo("artifact-pack", "imageRef", imageRef, "digest", p.Artifact.Digest, "layout", p.Layout, "files", len(p.Files()))
	return p, nil
}

func (o *OCI) openPackImage(ctx context.Context, r *imageRef) (*PackImage, error) {
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	if len(o.cfg.verifyKeys) > 0 {
		if err := o.verifySignatures(ctx, op); err != nil {
			return nil, err
		}
	}
	rs, remote := op.src.(*remoteSource)
	if remote {
		if p := rs.cache.loadPackMemo(ctx, op.art); p != nil {
			return p, nil
		}
	}
	p := &PackImage{Artifact: op.art}
	tree := &packTree{}
	budget := 4 * o.cfg.maxBlob
	if op.art.Layout == LayoutWasm {
		p.Layout, p.Root = PackFiles, "."
		err = o.readFileLayers(ctx, op, tree, budget)
	} else {
		p.Layout, p.Root = PackTar, PackImageRoot
		err = o.readTarLayers(ctx, op, tree, budget)
	}
	if err != nil {
		return nil, err
	}
	if p.files, err = tree.files(ctx); err != nil {
		return nil, err
	}
	p.steps = tree.steps
	if remote {
		rs.cache.storePackMemo(ctx, p)
	}
	return p, nil
}

// packMemo is what the cache keeps of a pack image, by its manifest
// digest: <cache>/packs/<alg>/<hex>.json. Each regular file is a blob of
// the cache (by its own digest, verified whenever read), so a later open
// of the same manifest reads no layer.
type packMemo struct {
	Layout string                   `json:"layout"`
	Root   string                   `json:"root"`
	Files  map[string]packMemoEntry `json:"files"`
}

type packMemoEntry struct {
	Digest string `json:"digest,omitempty"` // a regular file's
	Size   int64  `json:"size,omitempty"`
	Kind   string `json:"kind,omitempty"` // an irregular entry's
	Layer  string `json:"layer"`
}

func (c *cache) packMemoPath(manifest string) string {
	alg, hexPart := digestParts(manifest)
	return c.dir("packs", alg, hexPart+".json")
}

// storePackMemo stores p's files and its memo. It is an optimisation:
// failures are ignored, and so is a stop (ctx done) while storing.
func (c *cache) storePackMemo(ctx context.Context, p *PackImage) {
	m := packMemo{Layout: p.Layout, Root: p.Root, Files: map[string]packMemoEntry{}}
	stored := map[string]bool{} // each distinct file once, however many names it has
	for name, e := range p.files {
		if ctx.Err() != nil {
			return
		}
		me := packMemoEntry{Kind: e.kind, Layer: e.layer}
		if e.kind == "" {
			me.Digest, me.Size = Digest(e.data), int64(len(e.data))
			if !stored[me.Digest] {
				if c.putBytes(me.Digest, e.data) != nil {
					return
				}
				stored[me.Digest] = true
			}
		}
		m.Files[name] = me
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	dst := c.packMemoPath(p.Artifact.Digest)
	if os.MkdirAll(filepath.Dir(dst), 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(c.dir("tmp"), "pack.*")
	if err != nil {
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

// loadPackMemo returns the pack image of art from its memo, every file
// read from the cache and verified; nil when there is none or anything of
// it is missing, malformed or fails verification (the image is then read
// from its layers again, which sees a stop).
func (c *cache) loadPackMemo(ctx context.Context, art Artifact) *PackImage {
	b, err := ReadRegular(c.packMemoPath(art.Digest), MaxManifestSize)
	if err != nil {
		return nil
	}
	var m packMemo
	if json.Unmarshal(b, &m) != nil || (m.Layout != PackFiles && m.Layout != PackTar) {
		return nil
	}
	p := &PackImage{Artifact: art, Layout: m.Layout, Root: m.Root, files: map[string]packEntry{}}
	for name, me := range m.Files {
		if !fs.ValidPath(name) || ctx.Err() != nil {
			return nil
		}
		if me.Kind != "" {
			p.files[name] = packEntry{kind: me.Kind, layer: me.Layer}
			continue
		}
		if checkDigest(me.Digest) != nil {
			return nil
		}
		data, err := c.readBlob(me.Digest, me.Size)
		if err != nil {
			return nil
		}
		p.files[name] = packEntry{data: data, layer: me.Layer}
	}
	return p
}

func (o *OCI) readFileLayers(ctx context.Context, op *opened, tree *packTree, budget int64) error {
	var total int64
	for _, l := range op.doc.Layers {
		title := l.Annotations[AnnotationTitle]
		if title == "" {
			return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has no %s: every layer of a pack artifact is a file named by its title", op.ref, l.Digest, AnnotationTitle)
		}
		if err := CheckTitle(title); err != nil {
			return toolerr.New(toolerr.ArtifactRefused, "%s: %s", op.ref, toolerr.As(err).Message)
		}
		name := cleanPath(title)
		if _, dup := tree.get(name); dup {
			return toolerr.New(toolerr.ArtifactRefused, "%s: two layers are titled %q", op.ref, title)
		}
		if total += l.Size; total > budget {
			return toolerr.New(toolerr.ArtifactRefused, "%s: the pack's files are more than %d bytes in all", op.ref, budget)
		}
		if l.Annotations[annotationORASUnpack] == "true" {
			// oras push REF DIR: a tar of DIR, its entries named DIR/….
			isTar, comp := tarLayer(l.MediaType)
			if !isTar {
				return toolerr.New(toolerr.ArtifactRefused, "%s: directory layer %q has media type %q, not a tar layer", op.ref, title, l.MediaType)
			}
			if l.Size > o.cfg.maxBlob {
				return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s is %d bytes, over the %d-byte cap", op.ref, l.Digest, l.Size, o.cfg.maxBlob)
			}
			st := &packBudget{budget: budget - total, max: o.cfg.maxBlob}
			if err := o.applyLayer(ctx, op, l, comp, tree, st, name, true); err != nil {
				return err
			}
			total += st.used
			continue
		}
		b, err := o.readBlob(ctx, op.src, l)
		if err != nil {
			return err
		}
		tree.put(name, packEntry{data: b, layer: l.Digest})
	}
	return nil
}

func (o *OCI) readTarLayers(ctx context.Context, op *opened, tree *packTree, budget int64) error {
	st := &packBudget{budget: budget, max: o.cfg.maxBlob}
	for _, l := range op.doc.Layers {
		isTar, comp := tarLayer(l.MediaType)
		if !isTar {
			return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has media type %q, not a tar layer", op.ref, l.Digest, l.MediaType)
		}
		if l.Size > o.cfg.maxBlob {
			return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s is %d bytes, over the %d-byte cap", op.ref, l.Digest, l.Size, o.cfg.maxBlob)
		}
		if err := o.applyLayer(ctx, op, l, comp, tree, st, PackImageRoot, false); err != nil {
			return err
		}
	}
	return nil
}

type packBudget struct {
	budget, used, max int64
	entries           int
}

// applyLayer reads one tar layer to its end (so its digest is verified
// before anything of it is used) and applies it to tree, keeping what is
// below the directory keep; with only set, an entry elsewhere refuses the
// layer.
//
// The work is linear in the layer's entries and bytes, whatever the
// layers below hold: a whiteout or opaque marker that cannot reach keep is
// dropped as it is read, one that can is applied to tree once (a subtree
// dropped at its parent). The context is checked before every entry and
// every read of the unpacked stream, and the unpacked bytes are capped
// (unpackCap: maxUnpacked, and maxLayerRatio times a compressed layer's
// size), so a stop is honoured and a bomb refused within a bounded amount
// of work.
//
// As the OCI image spec says, .wh.NAME hides NAME and all below it in the
// lower layers, .wh..wh..opq hides everything the lower layers have in its
// directory, and neither touches an entry of its own layer. An entry
// replaces what the lower layers have by its name: a directory replaces a
// file (what is below a lower directory of that name stays), anything else
// replaces a directory and all below it.
func (o *OCI) applyLayer(ctx context.Context, op *opened, l descriptor, comp string, tree *packTree, st *packBudget, keep string, only bool) error {
	if err := ctx.Err(); err != nil {
		return toolerr.As(err)
	}
	rc, err := op.src.blob(ctx, l.Digest, l.Size, nil)
	if err != nil {
		return err
	}
	defer rc.Close()
	// A refusal found while reading may come from a tampered blob: when its
	// digest is wrong too, that is the error to report (not worth reading
	// for once the context is done).
	fail := func(err error) error {
		if ctx.Err() == nil {
			if _, derr := io.Copy(io.Discard, rc); errors.Is(derr, toolerr.ArtifactIntegrityFailed) {
				return derr
			}
		}
		return layerError(ctx, err, l)
	}
	var r io.Reader = rc
	switch comp {
	case compGzip:
		zr, err := gzip.NewReader(rc)
		if err != nil {
			return fail(err)
		}
		defer zr.Close()
		r = zr
	case compZstd:
		zr, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderLowmem(true))
		if err != nil {
			return fail(err)
		}
		defer zr.Close()
		r = zr
	}
	limit, byRatio := unpackCap(l.Size, comp)
	lr := &layerReader{ctx: ctx, r: r, max: limit, capErr: func() error {
		if byRatio {
			return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s unpacks to more than %d bytes, %d times its %d bytes (the decompression-ratio cap)", op.ref, l.Digest, limit, maxLayerRatio, l.Size)
		}
		return toolerr.New(toolerr.ArtifactRefused, "%s: layer %s unpacks to more than %d bytes", op.ref, l.Digest, limit)
	}}
	tr := tar.NewReader(lr)
	// What the layer does, applied once it is verified: deletions from the
	// lower layers first, then its own entries.
	var whiteouts, opaque, dirs []string
	added := map[string]packEntry{}
	for {
		if err := ctx.Err(); err != nil {
			return toolerr.As(err)
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		tree.steps++
		if st.entries++; st.entries > maxPackEntries {
			return fail(toolerr.New(toolerr.ArtifactRefused, "%s has more than %d tar entries (the entry cap)", op.ref, maxPackEntries))
		}
		name, ok := entryName(h.Name)
		if !ok {
			return fail(toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has an entry named %q, which leaves the image root", op.ref, l.Digest, h.Name))
		}
		if len(name) > maxEntryName {
			return fail(toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has an entry name of %d bytes, over the %d-byte cap", op.ref, l.Digest, len(name), maxEntryName))
		}
		if only && !below(name, keep) {
			return fail(toolerr.New(toolerr.ArtifactRefused, "%s: layer %s (a directory %s) has an entry named %q, outside that directory", op.ref, l.Digest, keep, h.Name))
		}
		if name == "" {
			continue
		}
		if h.Typeflag == tar.TypeDir {
			if below(name, keep) {
				dirs = append(dirs, name) // replaces an entry of that name
				delete(added, name)
			}
			continue
		}
		dir, base := path.Dir(name), path.Base(name)
		switch {
		case base == ".wh..wh..opq":
			if touches(dir, keep) {
				opaque = append(opaque, dir)
			}
			continue
		case strings.HasPrefix(base, ".wh."):
			if w := path.Join(dir, strings.TrimPrefix(base, ".wh.")); touches(w, keep) {
				whiteouts = append(whiteouts, w)
			}
			continue
		}
		if !below(name, keep) {
			continue // outside /app: not the pack's
		}
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Size > st.max {
				return fail(toolerr.New(toolerr.ArtifactRefused, "%s: /%s in layer %s is %d bytes, over the %d-byte cap", op.ref, name, l.Digest, h.Size, st.max))
			}
			if st.used += h.Size; st.used > st.budget {
				return fail(toolerr.New(toolerr.ArtifactRefused, "%s: the files under /%s unpack to more than %d bytes", op.ref, keep, st.budget))
			}
			b, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return fail(err)
			}
			added[name] = packEntry{data: b, layer: l.Digest}
		default:
			added[name] = packEntry{kind: tarKind(h.Typeflag), layer: l.Digest}
		}
	}
	// Drain what the tar reader left (padding, compression trailer) so the
	// verifier sees the whole blob; only then are its bytes trusted.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return readError(ctx, err, l.Digest)
	}
	var last int64
	step := func() error { return tree.check(ctx, &last) }
	for _, w := range whiteouts {
		tree.remove(w)
		if err := step(); err != nil {
			return err
		}
	}
	for _, d := range opaque {
		tree.clearBelow(d)
		if err := step(); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		tree.clearEntry(d)
		if err := step(); err != nil {
			return err
		}
	}
	for name := range added {
		tree.clearBelow(name) // a file replaces a lower directory
		if err := step(); err != nil {
			return err
		}
	}
	for name, e := range added {
		tree.put(name, e)
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// entryName is a tar entry's name as a path from the image root: a leading
// "/" or "./" is the root; "" for the root itself. ok is false for a name
// with a ".." element (a runtime unpacking it would write outside the
// root) or a backslash-free but otherwise invalid path.
func entryName(raw string) (string, bool) {
	n := strings.TrimLeft(raw, "/")
	for strings.HasPrefix(n, "./") {
		n = strings.TrimLeft(n[2:], "/")
	}
	n = strings.TrimSuffix(n, "/")
	if n == "" || n == "." {
		return "", true
	}
	for _, el := range strings.Split(n, "/") {
		if el == ".." {
			return "", false
		}
	}
	n = path.Clean(n)
	return n, fs.ValidPath(n)
}

func tarKind(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "a symbolic link"
	case tar.TypeLink:
		return "a hard link"
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeFifo:
		return "a FIFO"
	}
	return fmt.Sprintf("a tar entry of type %q", t)
}

// SameRepository reports whether two imageRefs name the same repository
// (registry host and path, or the same oci-layout directory), whatever
// tag or digest each names. Unparseable refs are never the same.
func SameRepository(a, b string) bool {
	ra, err := parseImageRef(a, nil)
	if err != nil {
		return false
	}
	rb, err := parseImageRef(b, nil)
	if err != nil {
		return false
	}
	if ra.layout != "" || rb.layout != "" {
		return ra.layout == rb.layout
	}
	return ra.repo.Name() == rb.repo.Name()
}

// PackFile is one file of a pack artifact to push: its title (a safe
// relative path, see CheckTitle) and bytes.
type PackFile struct {
	Title string
	Data  []byte
}

// ArtifactTypePack is the artifactType of the pack artifacts PushPack
// writes.
const ArtifactTypePack = "application/vnd.sandboxd.pack.v1"

// PushPack pushes files as a PackFiles artifact to imageRef (a registry
// tag or an oci-layout: ref, as Push): the OCI empty config, artifactType
// ArtifactTypePack, one layer per file titled with its path —
// application/wasm for a Wasm binary (so a codeArtifactRef may name it
// too), application/json for a .json file, else
// application/octet-stream — and version as the manifest's
// org.opencontainers.image.version. The bytes depend only on the inputs.
// It returns the pushed artifact (its Ref digest-pinned).
func (o *OCI) PushPack(ctx context.Context, imageRef, version string, files []PackFile) (*Artifact, error) {
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	if r.pinned() {
		return nil, toolerr.New(toolerr.ArtifactRefused, "push to a tag, not a digest: %s", imageRef)
	}
	if version == "" {
		return nil, toolerr.New(toolerr.ArtifactRefused, "an artifact needs a version (org.opencontainers.image.version)")
	}
	empty := []byte("{}")
	blobs := map[string][]byte{Digest(empty): empty}
	doc := manifestDoc{SchemaVersion: 2, MediaType: mediaTypeOCIManifest, ArtifactType: ArtifactTypePack,
		Config:      &descriptor{MediaType: mediaTypeOCIEmpty, Digest: Digest(empty), Size: int64(len(empty))},
		Annotations: map[string]string{AnnotationVersion: version}}
	seen := map[string]bool{}
	for _, f := range files {
		if err := CheckTitle(f.Title); err != nil {
			return nil, err
		}
		if seen[cleanPath(f.Title)] {
			return nil, toolerr.New(toolerr.ArtifactRefused, "two files are titled %q", f.Title)
		}
		seen[cleanPath(f.Title)] = true
		if int64(len(f.Data)) > o.cfg.maxBlob {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%q is %d bytes, over the %d-byte cap", f.Title, len(f.Data), o.cfg.maxBlob)
		}
		mt := "application/octet-stream"
		switch {
		case bytes.HasPrefix(f.Data, []byte("\x00asm")):
			mt = MediaTypeWasmLayer
		case strings.HasSuffix(f.Title, ".json"):
			mt = "application/json"
		}
		d := Digest(f.Data)
		blobs[d] = f.Data
		doc.Layers = append(doc.Layers, descriptor{MediaType: mt, Digest: d, Size: int64(len(f.Data)), Annotations: map[string]string{AnnotationTitle: f.Title}})
	}
	manifest, err := json.Marshal(doc)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.Internal, err, "")
	}
	md := Digest(manifest)
	if r.layout != "" {
		if err := writeLayout(r.layout, r.tag, blobs, manifest, mediaTypeOCIManifest); err != nil {
			return nil, err
		}
	} else {
		up, err := o.newUploader(ctx, r.repo)
		if err != nil {
			return nil, err
		}
		for _, l := range append([]descriptor{*doc.Config}, doc.Layers...) {
			if err := up.blob(ctx, l.Digest, blobs[l.Digest], nil); err != nil {
				return nil, registryError(ctx, err, "pushing to "+r.repo.Name(), up.auth, 0)
			}
		}
		if err := up.manifest(ctx, r.tag, mediaTypeOCIManifest, manifest); err != nil {
			return nil, err
		}
		if c, err := o.openCache(); err == nil { // the pushing host resolves it offline
			for d, b := range blobs {
				_ = c.putBytes(d, b)
			}
			_ = c.putBytes(md, manifest)
		}
	}
	art := &Artifact{Ref: r.canonical(md), Digest: md, MediaType: mediaTypeOCIManifest, ArtifactType: ArtifactTypePack,
		ConfigMediaType: mediaTypeOCIEmpty, Layout: LayoutWasm, Version: version, VersionFrom: VersionFromManifest,
		Size: int64(len(manifest))}
	for _, l := range doc.Layers {
		art.Layers = append(art.Layers, Layer{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Title: l.Annotations[AnnotationTitle]})
		art.Size += l.Size
	}
	return art, nil
}
