package artifact

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Inspect fetches the manifest imageRef names (not its layers) and
// describes it.
func (o *OCI) Inspect(ctx context.Context, imageRef string) (*Artifact, error) {
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	op, err := o.open(ctx, r)
	if err != nil {
		return nil, err
	}
	art := op.art
	for _, d := range []string{art.Digest, art.Index} {
		if d == "" {
			continue
		}
		// Best effort: a registry that fails the lookup still gets inspected.
		if refs, err := o.referrers(ctx, op.src, d); err == nil {
			art.Referrers = append(art.Referrers, refs...)
		}
	}
	return &art, nil
}

// Progress reports bytes moved for one blob of a pull or push.
type Progress struct {
	Digest string
	Done   int64
	Total  int64
}

// CallOption configures one Pull or Push.
type CallOption func(*callOptions)

type callOptions struct {
	progress    func(Progress)
	created     time.Time
	annotations map[string]string
	tags        []string
}

// WithAnnotations adds annotations to the manifest a Push writes (beside
// org.opencontainers.image.version, which they may not contradict).
func WithAnnotations(a map[string]string) CallOption {
	return func(o *callOptions) { o.annotations = a }
}

// WithCreated sets the created time a Push writes in the artifact's config
// (DefaultCreated when not given).
func WithCreated(t time.Time) CallOption {
	return func(o *callOptions) { o.created = t }
}

// WithTags has a Push to a registry point these tags of the target's
// repository at the pushed manifest too, after the target's own tag (as
// oras push registry/repo:t1,t2 does). Every tag is checked before
// anything is sent; a layout target refuses them.
func WithTags(tags ...string) CallOption {
	return func(o *callOptions) { o.tags = append(o.tags, tags...) }
}

// WithProgress has fn called as bytes move (from the calling goroutine).
func WithProgress(fn func(Progress)) CallOption {
	return func(o *callOptions) { o.progress = fn }
}

// Pull fetches the manifest imageRef names and every blob it references
// (config and layers) into the cache, each verified, and describes the
// artifact. For oci-layout refs it verifies every blob in place.
func (o *OCI) Pull(ctx context.Context, imageRef string, opts ...CallOption) (*Artifact, error) {
	var co callOptions
	for _, opt := range opts {
		opt(&co)
	}
	r, err := parseImageRef(imageRef, o.insecure)
	if err != nil {
		return nil, err
	}
	op, err := o.openManifest(ctx, r)
	if err != nil {
		return nil, err
	}
	blobs := append([]descriptor{*op.doc.Config}, op.doc.Layers...)
	for _, l := range blobs {
		if l.Size > o.cfg.maxBlob {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: blob %s is %d bytes, over the %d-byte cap", r, l.Digest, l.Size, o.cfg.maxBlob)
		}
	}
	if len(o.cfg.verifyKeys) > 0 {
		// Under a key policy nothing but the config is fetched before the
		// signature verifies.
		if err := o.openConfig(ctx, op); err != nil {
			return nil, err
		}
		if err := o.verifySignatures(ctx, op); err != nil {
			return nil, err
		}
		if err := o.fetchAll(ctx, op.src, blobs, co.progress)(); err != nil {
			return nil, err
		}
		return &op.art, nil
	}
	// Otherwise the layers download while the config is read and checked
	// (the config GET is not a round trip ahead of them); a refused config
	// cancels them. The config's two readers share one download (flight).
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := o.fetchAll(fctx, op.src, blobs, co.progress)
	if err := o.openConfig(ctx, op); err != nil {
		cancel()
		wait()
		return nil, err
	}
	if err := wait(); err != nil {
		return nil, err
	}
	return &op.art, nil
}

// fetchAll starts fetching blobs into the cache, at most cfg.concurrency
// at once; the first failure cancels the others. The returned wait blocks
// until all are done and reports the failure that caused the others'
// cancellation. progress calls are serialised.
func (o *OCI) fetchAll(ctx context.Context, src source, blobs []descriptor, progress func(Progress)) (wait func() error) {
	var pmu sync.Mutex
	cctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, o.cfg.concurrency)
	errs := make([]error, len(blobs))
	fns := make([]func(int64), len(blobs))
	for i, l := range blobs {
		if progress != nil {
			dg, total := l.Digest, l.Size
			fns[i] = func(n int64) {
				pmu.Lock()
				defer pmu.Unlock()
				progress(Progress{Digest: dg, Done: n, Total: total})
			}
			fns[i](0)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, l := range blobs {
			select {
			case sem <- struct{}{}:
			case <-cctx.Done():
				errs[i] = ctxError(ctx, "waiting to fetch blob "+l.Digest)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := src.fetch(cctx, l.Digest, l.Size, fns[i]); err != nil {
					errs[i] = err
					cancel()
					return
				}
				if fns[i] != nil {
					fns[i](l.Size)
				}
			}()
		}
	}()
	return func() error {
		wg.Wait()
		cancel()
		for _, err := range errs {
			if err != nil && !errors.Is(err, toolerr.Cancelled) {
				return readError(ctx, err, "")
			}
		}
		for _, err := range errs {
			if err != nil {
				return readError(ctx, err, "")
			}
		}
		return nil
	}
}

// flight makes concurrent downloads of one digest share one transfer.
type flight struct {
	mu sync.Mutex
	m  map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	err  error
}

func (f *flight) do(ctx context.Context, key string, fn func() error) error {
	f.mu.Lock()
	if c, ok := f.m[key]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
			if c.err != nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) && ctx.Err() == nil {
				return f.do(ctx, key, fn) // the leader gave up; try on our own time
			}
			return c.err
		case <-ctx.Done():
			return toolerr.As(ctx.Err())
		}
	}
	c := &flightCall{done: make(chan struct{})}
	f.m[key] = c
	f.mu.Unlock()
	c.err = fn()
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
	close(c.done)
	return c.err
}
