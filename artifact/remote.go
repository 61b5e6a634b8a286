package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandboxd/toolerr"
)

// registryClient is the long-lived puller of one registry: one authenticated
// transport (its bearer token is refreshed and widened to new repositories
// as the registry asks) over one shared connection pool.
type registryClient struct {
	sem    chan struct{} // held while the handshake runs
	client *http.Client
	auth   authInfo
}

// registry returns the client for repo's registry, doing the auth handshake
// on first use (bounded by the request timeout). A failed handshake is not
// remembered.
func (o *OCI) registry(ctx context.Context, repo name.Repository) (*http.Client, authInfo, error) {
	key := repo.RegistryStr()
	o.mu.Lock()
	rc := o.regs[key]
	if rc == nil {
		rc = &registryClient{sem: make(chan struct{}, 1)}
		o.regs[key] = rc
	}
	o.mu.Unlock()
	ai := authInfo{registry: key, anonymous: true}
	step := "connecting to " + key + " (auth handshake)"
	select {
	case rc.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ai, ctxError(ctx, step)
	}
	defer func() { <-rc.sem }()
	if rc.client != nil {
		return rc.client, rc.auth, nil
	}
	auth, err := authn.Resolve(ctx, o.cfg.keychain, repo.Registry)
	if err != nil {
		return nil, ai, newErr(toolerr.ArtifactUnavailable, err, "cannot read the credentials for %s from the docker config %s: %v", key, dockerConfigPath(), err)
	}
	ai.anonymous = auth == authn.Anonymous
	if cfg, err := auth.Authorization(); err == nil && *cfg == (authn.AuthConfig{}) {
		ai.anonymous = true
	}
	hctx, cancel := context.WithTimeoutCause(ctx, o.cfg.requestTimeout, &stepTimeout{step: step, d: o.cfg.requestTimeout})
	defer cancel()
	hctx, attempts := withAttempts(hctx)
	tr, err := transport.NewWithContext(hctx, repo.Registry, auth, o.pullTransport, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ai, ctxError(ctx, step)
		}
		return nil, ai, registryError(hctx, err, step, ai, int(attempts.Load()))
	}
	rc.client = &http.Client{Transport: tr, CheckRedirect: checkRedirect}
	rc.auth = ai
	return rc.client, ai, nil
}

// remoteSource reads one repository of a registry through the cache.
type remoteSource struct {
	o     *OCI
	ref   *imageRef
	cache *cache
}

func (s *remoteSource) url(kind, ident string) string {
	r := s.ref.repo
	return fmt.Sprintf("%s://%s/v2/%s/%s/%s", r.Scheme(), r.RegistryStr(), r.RepositoryStr(), kind, ident)
}

// do sends one registry request. step names it in errors ("GET blob
// sha256:… of registry/repo"). The request has its own deadline, the
// OCI's request timeout: the answer must start within it, and the body
// may go no longer than it without a byte (a hung registry fails the
// step with deadline-exceeded instead of holding the caller).
func (s *remoteSource) do(ctx context.Context, method, u, accept, step string) (*http.Response, error) {
	client, ai, err := s.o.registry(ctx, s.ref.repo)
	if err != nil {
		return nil, err
	}
	d := s.o.cfg.requestTimeout
	rctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(d, func() { cancel(&stepTimeout{step: step, d: d}) })
	fail := func(err error, attempts int) error {
		timer.Stop()
		e := registryError(rctx, err, step, ai, attempts)
		cancel(nil)
		return e
	}
	actx, attempts := withAttempts(rctx)
	req, err := http.NewRequestWithContext(actx, method, u, nil)
	if err != nil {
		return nil, fail(err, 0)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fail(err, int(attempts.Load()))
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		resp.Body.Close()
		return nil, fail(err, int(attempts.Load()))
	}
	resp.Body = &stallBody{rc: resp.Body, ctx: rctx, timer: timer, d: d, cancel: cancel}
	return resp, nil
}

// stallBody is a response body whose request is cancelled when no byte
// arrives for d; it then fails with the step's deadline-exceeded.
type stallBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	timer  *time.Timer
	d      time.Duration
	cancel context.CancelCauseFunc
}

func (b *stallBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.timer.Reset(b.d)
	}
	if err != nil && err != io.EOF {
		var st *stepTimeout
		if errors.As(context.Cause(b.ctx), &st) {
			return n, st.toolErr()
		}
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

type tagEntry struct {
	digest string
	size   int64
	at     time.Time
}

// resolveTag finds the digest a tag points at: from memory while younger
// than the tag TTL, else with a HEAD request (a GET when the registry's HEAD
// gives no digest).
func (s *remoteSource) resolveTag(ctx context.Context, tag string) (string, int64, error) {
	key := s.ref.repo.Name() + ":" + tag
	s.o.mu.Lock()
	e, ok := s.o.tags[key]
	s.o.mu.Unlock()
	if ok && time.Since(e.at) < s.o.cfg.tagTTL {
		return e.digest, e.size, nil
	}
	d, size, err := s.headTag(ctx, tag)
	if err != nil {
		return "", 0, err
	}
	s.o.mu.Lock()
	s.o.tags[key] = tagEntry{digest: d, size: size, at: time.Now()}
	s.o.mu.Unlock()
	return d, size, nil
}

func (s *remoteSource) headTag(ctx context.Context, tag string) (string, int64, error) {
	resp, err := s.do(ctx, http.MethodHead, s.url("manifests", tag), manifestAccept, fmt.Sprintf("resolving tag %q of %s", tag, s.ref.repo.Name()))
	if err != nil {
		return "", 0, err
	}
	resp.Body.Close()
	if resp.ContentLength > MaxManifestSize {
		return "", 0, toolerr.New(toolerr.ArtifactRefused, "manifest of %s is %d bytes, over the %d-byte cap", s.ref, resp.ContentLength, MaxManifestSize)
	}
	if d := resp.Header.Get("Docker-Content-Digest"); checkDigest(d) == nil {
		return d, resp.ContentLength, nil
	}
	// No usable digest header: fetch by tag and hash what arrives.
	raw, err := s.getManifest(ctx, tag)
	if err != nil {
		return "", 0, err
	}
	d := Digest(raw)
	if err := s.cache.putBytes(d, raw); err != nil {
		return "", 0, err
	}
	return d, int64(len(raw)), nil
}

// manifest returns the manifest blob d: from the cache, else from the
// registry, verified and then cached.
func (s *remoteSource) manifest(ctx context.Context, d string, size int64) ([]byte, error) {
	if size > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "manifest %s is %d bytes, over the %d-byte cap", d, size, MaxManifestSize)
	}
	if b, err := s.cache.readBlob(d, size); err == nil {
		return b, nil
	} else if !errors.Is(err, errNotCached) {
		return nil, err
	}
	raw, err := s.getManifest(ctx, d)
	if err != nil {
		return nil, err
	}
	if got := digestWith(d, raw); got != d {
		return nil, toolerr.New(toolerr.ArtifactIntegrityFailed, "manifest of %s hashes to %s, not the requested %s", s.ref, got, d)
	}
	if size >= 0 && int64(len(raw)) != size {
		return nil, toolerr.New(toolerr.ArtifactIntegrityFailed, "manifest %s has %d bytes, its descriptor says %d", d, len(raw), size)
	}
	if err := s.cache.putBytes(d, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// getManifest GETs a manifest by tag or digest, refusing one over
// MaxManifestSize before reading it.
func (s *remoteSource) getManifest(ctx context.Context, ident string) ([]byte, error) {
	step := fmt.Sprintf("GET manifest %s of %s", ident, s.ref.repo.Name())
	resp, err := s.do(ctx, http.MethodGet, s.url("manifests", ident), manifestAccept, step)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "manifest of %s is %d bytes, over the %d-byte cap", s.ref, resp.ContentLength, MaxManifestSize)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil {
		return nil, registryError(ctx, err, step, authInfo{registry: s.ref.repo.RegistryStr()}, 0)
	}
	if int64(len(raw)) > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "manifest of %s is over the %d-byte cap", s.ref, MaxManifestSize)
	}
	return raw, nil
}

// blob opens blob d (size bytes) from the cache, downloading it first when
// absent. Concurrent callers for one digest share one download.
func (s *remoteSource) blob(ctx context.Context, d string, size int64, progress func(int64)) (io.ReadCloser, error) {
	if rc, err := s.cache.openBlob(d, size); err == nil {
		return rc, nil
	} else if !errors.Is(err, errNotCached) {
		return nil, err
	}
	if err := s.o.flight.do(ctx, d, func() error { return s.download(ctx, d, size, progress) }); err != nil {
		return nil, err
	}
	// Just downloaded: its bytes were hashed as they streamed in; they are
	// not hashed again.
	return s.cache.openVerified(d, size)
}

// fetch makes sure blob d is in the cache, verified: a cached copy is read
// once to verify it (one that fails is removed and downloaded again), an
// absent one is downloaded, verified as it streams.
func (s *remoteSource) fetch(ctx context.Context, d string, size int64, progress func(int64)) error {
	if rc, err := s.cache.openBlob(d, size); err == nil {
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err == nil || !errors.Is(err, toolerr.ArtifactIntegrityFailed) {
			return err
		}
	} else if !errors.Is(err, errNotCached) {
		return err
	}
	return s.o.flight.do(ctx, d, func() error { return s.download(ctx, d, size, progress) })
}

// download fetches blob d into the cache. The descriptor's size is checked
// before the request; Content-Length must agree; the bytes are verified as
// they stream. An interrupted transfer is retried from the start.
func (s *remoteSource) download(ctx context.Context, d string, size int64, progress func(int64)) error {
	if size > s.o.cfg.maxBlob {
		return toolerr.New(toolerr.ArtifactRefused, "blob %s is %d bytes, over the %d-byte cap", d, size, s.o.cfg.maxBlob)
	}
	start := time.Now()
	repo, ref := s.ref.repo.Name(), s.ref.String()
	s.o.logInfo("artifact-download", "ref", ref, "repo", repo, "digest", d, "size", size, "state", "started")
	if s.o.cfg.log != nil && size > LargeBlob {
		inner := progress
		var last time.Time
		progress = func(n int64) {
			if inner != nil {
				inner(n)
			}
			if now := time.Now(); now.Sub(last) >= 5*time.Second {
				if !last.IsZero() {
					s.o.logInfo("artifact-download", "ref", ref, "repo", repo, "digest", d, "size", size, "state", "progress", "bytes", n, "ms", now.Sub(start).Milliseconds())
				}
				last = now
			}
		}
	}
	err := s.transfer(ctx, d, size, progress)
	if err == nil {
		s.o.logInfo("artifact-download", "ref", ref, "repo", repo, "digest", d, "size", size, "state", "done", "ms", time.Since(start).Milliseconds())
	}
	return err
}

// LargeBlob is the size above which a download logs its progress (every
// 5 s while it streams).
const LargeBlob = 4 << 20

// transfer downloads blob d into the cache, retrying an interrupted transfer.
func (s *remoteSource) transfer(ctx context.Context, d string, size int64, progress func(int64)) error {
	var last error
	for attempt := 1; attempt <= retryAttempts; attempt++ {
		if attempt > 1 {
			if err := sleepCtx(ctx, retryBase<<(attempt-2)); err != nil {
				return ctxError(ctx, fmt.Sprintf("waiting to retry the download of blob %s", d))
			}
		}
		resp, err := s.do(ctx, http.MethodGet, s.url("blobs", d), "", fmt.Sprintf("GET blob %s of %s", d, s.ref.repo.Name()))
		if err != nil {
			return err
		}
		if resp.ContentLength >= 0 && size >= 0 && resp.ContentLength != size {
			resp.Body.Close()
			return toolerr.New(toolerr.ArtifactIntegrityFailed, "registry sends %d bytes for blob %s, its descriptor says %d", resp.ContentLength, d, size)
		}
		err = s.cache.write(d, size, s.o.cfg.maxBlob, resp.Body, progress)
		resp.Body.Close()
		if err == nil {
			return nil
		}
		var te *toolerr.Error
		if ctx.Err() != nil {
			return ctxError(ctx, fmt.Sprintf("downloading blob %s of %s", d, s.ref.repo.Name()))
		}
		if errors.As(err, &te) {
			return te
		}
		last = err
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, last, fmt.Sprintf("download of blob %s from %s was interrupted %d times", d, s.ref.repo.Name(), retryAttempts))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
