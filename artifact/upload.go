package artifact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandboxd/toolerr"
)

// uploader pushes to one repository with monolithic uploads: HEAD the blob
// (skip it when present), POST to open an upload, one PUT with the whole
// body and its digest. (A chunked PATCH upload made docker-registry re-read
// the blob to hash it at the final PUT: pushes took 1.5x ORAS's.)
type uploader struct {
	o      *OCI
	repo   name.Repository
	client *http.Client
	auth   authInfo
}

func (o *OCI) newUploader(ctx context.Context, repo name.Repository) (*uploader, error) {
	ai := authInfo{registry: repo.RegistryStr(), push: true, anonymous: true}
	step := "connecting to " + repo.RegistryStr() + " to push (auth handshake)"
	auth, err := authn.Resolve(ctx, o.cfg.keychain, repo.Registry)
	if err != nil {
		return nil, newErr(toolerr.ArtifactUnavailable, err, "cannot read the credentials for %s from the docker config %s: %v", repo.RegistryStr(), dockerConfigPath(), err)
	}
	if c, err := auth.Authorization(); err == nil && *c != (authn.AuthConfig{}) {
		ai.anonymous = false
	}
	hctx, cancel := context.WithTimeoutCause(ctx, o.cfg.requestTimeout, &stepTimeout{step: step, d: o.cfg.requestTimeout})
	defer cancel()
	tr, err := transport.NewWithContext(hctx, repo.Registry, auth, o.pullTransport, []string{repo.Scope(transport.PushScope)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, step)
		}
		return nil, registryError(hctx, err, step, ai, 0)
	}
	return &uploader{o: o, repo: repo, client: &http.Client{Transport: tr, CheckRedirect: checkRedirect}, auth: ai}, nil
}

func (u *uploader) url(path string) string {
	return fmt.Sprintf("%s://%s/v2/%s/%s", u.repo.Scheme(), u.repo.RegistryStr(), u.repo.RepositoryStr(), path)
}

// payload is a request body that can be sent again (a retry): bytes in
// memory, or a file opened anew for each attempt.
type payload struct {
	size int64
	open func() (io.ReadCloser, error)
}

func bytesPayload(b []byte, progress func(int64)) *payload {
	return &payload{size: int64(len(b)), open: func() (io.ReadCloser, error) {
		if progress != nil {
			return io.NopCloser(&progressBytes{b: b, fn: progress}), nil
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// filePayload sends the file at path. Without progress the body is the
// *os.File itself, which net/http hands to the kernel (sendfile(2)): the
// bytes are not copied through this process.
func filePayload(path string, size int64, progress func(int64)) *payload {
	return &payload{size: size, open: func() (io.ReadCloser, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			return &progressFile{f: f, fn: progress}, nil
		}
		return f, nil
	}}
}

// progressFile is a file upload body that reports its progress.
type progressFile struct {
	f  *os.File
	n  int64
	fn func(int64)
}

func (p *progressFile) Read(b []byte) (int, error) {
	n, err := p.f.Read(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}

func (p *progressFile) Close() error { return p.f.Close() }

// send does one request with body (nil: none) and checks its status.
func (u *uploader) send(ctx context.Context, method, target, contentType string, body *payload, step string, want ...int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, newErr(toolerr.ArtifactUnavailable, err, "%s: bad URL %s", step, target)
	}
	if body != nil {
		rc, err := body.open()
		if err != nil {
			return nil, newErr(toolerr.ArtifactUnavailable, err, "%s: %v", step, err)
		}
		req.Body = rc
		req.GetBody = body.open
		req.ContentLength = body.size
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, registryError(ctx, err, step, u.auth, 0)
	}
	if err := transport.CheckError(resp, want...); err != nil {
		resp.Body.Close()
		return nil, registryError(ctx, err, step, u.auth, 0)
	}
	return resp, nil
}

// upload uploads layer l's blob: from the cache file when it has one,
// else from memory.
func (u *uploader) upload(ctx context.Context, l pushLayer, progress func(int64)) error {
	if l.path != "" {
		return u.blobBody(ctx, l.digest, filePayload(l.path, l.size, progress))
	}
	return u.blob(ctx, l.digest, l.data, progress)
}

// blob uploads b (digest d) unless the repository has it.
func (u *uploader) blob(ctx context.Context, d string, b []byte, progress func(int64)) error {
	return u.blobBody(ctx, d, bytesPayload(b, progress))
}

// blobBody uploads body (digest d) unless the repository has it.
func (u *uploader) blobBody(ctx context.Context, d string, body *payload) error {
	step := fmt.Sprintf("pushing blob %s to %s", d, u.repo.Name())
	if resp, err := u.send(ctx, http.MethodHead, u.url("blobs/"+d), "", nil, step, http.StatusOK, http.StatusNotFound); err != nil {
		return err
	} else {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	resp, err := u.send(ctx, http.MethodPost, u.url("blobs/uploads/"), "", nil, step, http.StatusAccepted)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return toolerr.New(toolerr.ArtifactUnavailable, "%s: the registry opened an upload without a usable Location", step)
	}
	if err := checkUploadLocation(resp.Request.URL, loc); err != nil {
		return toolerr.New(toolerr.ArtifactUnavailable, "%s: %v", step, err)
	}
	q := loc.Query()
	q.Set("digest", d)
	loc.RawQuery = q.Encode()
	resp, err = u.send(ctx, http.MethodPut, loc.String(), "application/octet-stream", body, step, http.StatusCreated)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// manifest puts manifest m (media type mt) under tag.
func (u *uploader) manifest(ctx context.Context, tag, mt string, m []byte) error {
	resp, err := u.send(ctx, http.MethodPut, u.url("manifests/"+tag), mt, bytesPayload(m, nil), fmt.Sprintf("pushing the manifest to %s:%s", u.repo.Name(), tag), http.StatusCreated, http.StatusOK)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// checkUploadLocation refuses an upload Location on another host that is
// a loopback, private or link-local address (the blob would be sent to an
// internal service a malicious registry chose), or that drops to http.
func checkUploadLocation(from, to *url.URL) error {
	if to.Host == from.Host {
		return nil
	}
	if from.Scheme == "https" && to.Scheme != "https" {
		return fmt.Errorf("refusing the upload location %s: it leaves https", to.Redacted())
	}
	if ip := net.ParseIP(to.Hostname()); ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()) || to.Hostname() == "localhost" {
		return fmt.Errorf("refusing the upload location %s: another host on a local address", to.Redacted())
	}
	return nil
}

// progressBytes is an upload body that reports its progress. It writes
// itself in 1 MiB slices (WriteTo), so the transport sends large writes
// instead of copying it through its 4 KiB buffer (a plain Read wrapper
// cost 6400 write calls per 25 MB).
type progressBytes struct {
	b   []byte
	off int
	fn  func(int64)
}

func (p *progressBytes) Read(q []byte) (int, error) {
	if p.off >= len(p.b) {
		return 0, io.EOF
	}
	n := copy(q, p.b[p.off:])
	p.off += n
	p.fn(int64(p.off))
	return n, nil
}

func (p *progressBytes) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for p.off < len(p.b) {
		end := min(p.off+1<<20, len(p.b))
		n, err := w.Write(p.b[p.off:end])
		p.off += n
		total += int64(n)
		p.fn(int64(p.off))
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
