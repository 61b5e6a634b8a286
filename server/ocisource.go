package server

import (
	"context"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

// OCIIndexSource reads a pack index carried in an OCI image
// (`serve --index oci://REF`): every load (boot and reload) resolves Ref
// with OCI — a tag is re-resolved whenever OCI asks the registry again
// (serve calls OCI.ForgetTags before a SIGHUP reload) — and reads the
// index and its modules from the image (pack.ImageSource: the layouts,
// the module-root and bundle-map rules, the strict pinning rule). The
// image's blobs come through OCI's cache, so a digest-pinned Ref boots
// offline once pulled. A load is bounded by OCI's per-request deadline
// and stops with the context it is given (SIGTERM during boot).
//
// ModuleRoot and BundleMap are paths inside the image ("" for the rules of
// pack.ImageSource). Verify, when set, is given the index's exact bytes
// and the artifact actually resolved, before the index is parsed (a
// deploy envelope's check); an error refuses the load.
type OCIIndexSource struct {
	Ref        string
	OCI        *artifact.OCI
	ModuleRoot string
	BundleMap  string
	Verify     func(index []byte, image *artifact.Artifact) error
}

// load implements Source without a context of its own.
func (s OCIIndexSource) load() (*packSpec, []Problem) { return s.loadContext(context.Background()) }

func (s OCIIndexSource) loadContext(ctx context.Context) (*packSpec, []Problem) {
	img, err := s.OCI.OpenPackImage(ctx, s.Ref)
	if err != nil {
		te := toolerr.As(err)
		return nil, []Problem{{Path: "oci://" + s.Ref, Code: string(te.Code), Message: te.Message}}
	}
	// The index and its modules are read under ctx too: a stop (SIGTERM,
	// the end of a reload) fails the reads still to come.
	is := pack.ImageSource{Image: img.WithContext(ctx), Ref: s.Ref, Pinned: artifact.DigestPinned(s.Ref), ModuleRoot: s.ModuleRoot, BundleMap: s.BundleMap}
	if s.Verify != nil {
		is.Verify = func(index []byte) error { return s.Verify(index, &img.Artifact) }
	}
	p, problems := is.Read()
	if p == nil {
		return nil, serverProblems(problems)
	}
	spec := &packSpec{packID: p.ID, packVersion: p.Version, artifactVersion: p.ArtifactVersion}
	if p.Env != nil {
		spec.requiredEnv, spec.hasEnv = p.Env.Required, true
	}
	spec.addPack(p)
	return spec, serverProblems(problems)
}

// contextSource is a Source whose reading does network I/O: it is given
// the load's context.
type contextSource interface {
	loadContext(ctx context.Context) (*packSpec, []Problem)
}

// loadSource reads src, with ctx when it takes one.
func loadSource(ctx context.Context, src Source) (*packSpec, []Problem) {
	if cs, ok := src.(contextSource); ok {
		return cs.loadContext(ctx)
	}
	return src.load()
}
