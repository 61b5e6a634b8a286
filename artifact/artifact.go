package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Kinds of codeArtifactRef.
const (
	KindOCI        = "oci"
	KindFilesystem = "filesystem"
)

// DefaultMaxModuleSize caps the size of a module read from any source.
const DefaultMaxModuleSize = 256 << 20

// Ref is a codeArtifactRef (docs/DESIGN.md "OCI artifacts").
type Ref struct {
	Kind            string
	ImageRef        string
	ModulePath      string
	ArtifactVersion string
}

// Module is a resolved Wasm module.
type Module struct {
	// Bytes is the module binary. Callers must not modify it.
	Bytes []byte
	// Digest is "sha256:<hex>" of Bytes.
	Digest string
	// Source says where the bytes came from (a path or an image reference).
	Source string
}

// Resolver turns a Ref into module bytes. Implementations are safe for
// concurrent use. Failures are *toolerr.Error with an artifact-* code.
type Resolver interface {
	Resolve(ctx context.Context, ref Ref) (*Module, error)
}

// Digest returns the "sha256:<hex>" digest of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Filesystem resolves filesystem refs: modulePath is a host path. Relative
// paths are resolved against BaseDir (the directory of the manifest that
// names them). It is the local-development source; production deployments
// refuse filesystem refs before they reach it.
type Filesystem struct {
	// BaseDir anchors relative module paths. Empty means the working directory.
	BaseDir string
	// MaxSize caps the module size; 0 means DefaultMaxModuleSize.
	MaxSize int64
}

// Resolve implements Resolver.
func (f Filesystem) Resolve(ctx context.Context, ref Ref) (*Module, error) {
	if ref.Kind != KindFilesystem {
		return nil, toolerr.New(toolerr.ArtifactRefused, "filesystem resolver cannot resolve a %q ref", ref.Kind)
	}
	if err := ctx.Err(); err != nil {
		return nil, toolerr.As(err)
	}
	p := ref.ModulePath
	if !filepath.IsAbs(p) && f.BaseDir != "" {
		p = filepath.Join(f.BaseDir, p)
	}
	limit := f.MaxSize
	if limit <= 0 {
		limit = DefaultMaxModuleSize
	}
	// OpenRegular refuses FIFOs, devices and directories without blocking
	// (a FIFO opened the ordinary way waits for a writer forever).
	file, err := OpenRegular(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "module %s does not exist", p)
		}
		if errors.Is(err, ErrNotRegular) {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "a module must be a regular file")
		}
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot open module")
	}
	defer file.Close()
	b, err := readAllCapped(file, "module "+p, limit)
	if err != nil {
		return nil, err
	}
	return &Module{Bytes: b, Digest: Digest(b), Source: p}, nil
}

// Bytes is a Resolver for a module already in memory (an embedded example,
// a test). It ignores the ref's path.
type Bytes []byte

// Resolve implements Resolver.
func (b Bytes) Resolve(ctx context.Context, ref Ref) (*Module, error) {
	return &Module{Bytes: b, Digest: Digest(b), Source: "memory"}, nil
}

// Unsupported refuses every ref of its kind; it stands in for a backend that
// is not configured.
type Unsupported struct{ Reason string }

// Resolve implements Resolver.
func (u Unsupported) Resolve(ctx context.Context, ref Ref) (*Module, error) {
	return nil, toolerr.New(toolerr.ArtifactUnavailable, "cannot resolve %s ref %q: %s", ref.Kind, refName(ref), u.Reason)
}

func refName(r Ref) string {
	if r.ImageRef != "" {
		return r.ImageRef + "#" + r.ModulePath
	}
	return r.ModulePath
}

// Mux dispatches on the ref's kind. A kind without a resolver is refused with
// artifact-refused.
type Mux map[string]Resolver

// Resolve implements Resolver.
func (m Mux) Resolve(ctx context.Context, ref Ref) (*Module, error) {
	r, ok := m[ref.Kind]
	if !ok || r == nil {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s artifact refs are not allowed here", kindName(ref.Kind))
	}
	return r.Resolve(ctx, ref)
}

func kindName(k string) string {
	if k == "" {
		return "untyped"
	}
	return fmt.Sprintf("%q", k)
}
