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
}

// registry returns the client for repo's registry, doing the auth handshake
// on first use. A failed handshake is not remembered.
func (o *OCI) registry(ctx context.Context, repo name.Repository) (*http.Client, error) {
	key := repo.RegistryStr()
	o.mu.Lock()
	rc := o.regs[key]
	if rc == nil {
		rc = &registryClient{sem: make(chan struct{}, 1)}
		o.regs[key] = rc
	}
	o.mu.Unlock()
	select {
	case rc.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, toolerr.As(ctx.Err())
	}
	defer func() { <-rc.sem }()
	if rc.client != nil {
		return rc.client, nil
	}
	auth, err := authn.Resolve(ctx, o.cfg.keychain, repo.Registry)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("cannot read credentials for %s", key))
	}
	tr, err := transport.NewWithContext(ctx, repo.Registry, auth, o.pullTransport, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, registryError(ctx, err, fmt.Sprintf("registry %s", key))
	}
	rc.client = &http.Client{Transport: tr, CheckRedirect: checkRedirect}
	return rc.client, nil
}

// registryError maps a registry or transport failure to an artifact-* error.
func registryError(ctx context.Context, err error, what string) *toolerr.Error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		return toolerr.As(ctx.Err())
	}
	var he *transport.Error
	if errors.As(err, &he) {
		switch he.StatusCode {
		case http.StatusNotFound:
			return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what+" not found")
		case http.StatusUnauthorized, http.StatusForbidden:
			return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what+": access denied (check the credentials in the docker config)")
		}
		for _, d := range he.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what+" not found")
			}
		}
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what)
	}
	var pe *plainHTTPError
	if errors.As(err, &pe) {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what+" is unreachable")
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, err, what+" is unreachable")
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

func (s *remoteSource) do(ctx context.Context, method, u, accept string) (*http.Response, error) {
	client, err := s.o.registry(ctx, s.ref.repo)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "bad registry URL")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, registryError(ctx, err, s.ref.repo.Name())
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		resp.Body.Close()
		return nil, registryError(ctx, err, s.ref.String())
	}
	return resp, nil
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
	resp, err := s.do(ctx, http.MethodHead, s.url("manifests", tag), manifestAccept)
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
	if got := Digest(raw); got != d {
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
	resp, err := s.do(ctx, http.MethodGet, s.url("manifests", ident), manifestAccept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "manifest of %s is %d bytes, over the %d-byte cap", s.ref, resp.ContentLength, MaxManifestSize)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil {
		return nil, registryError(ctx, err, "reading the manifest of "+s.ref.String())
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
	return s.cache.openBlob(d, size)
}

// download fetches blob d into the cache. The descriptor's size is checked
// before the request; Content-Length must agree; the bytes are verified as
// they stream. An interrupted transfer is retried from the start.
func (s *remoteSource) download(ctx context.Context, d string, size int64, progress func(int64)) error {
	if size > s.o.cfg.maxBlob {
		return toolerr.New(toolerr.ArtifactRefused, "blob %s is %d bytes, over the %d-byte cap", d, size, s.o.cfg.maxBlob)
	}
	var last error
	for attempt := 1; attempt <= retryAttempts; attempt++ {
		if attempt > 1 {
			if err := sleepCtx(ctx, retryBase<<(attempt-2)); err != nil {
				return toolerr.As(err)
			}
		}
		resp, err := s.do(ctx, http.MethodGet, s.url("blobs", d), "")
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
		if errors.As(err, &te) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return toolerr.As(ctx.Err())
			}
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
