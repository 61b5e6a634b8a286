package artifact

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Registry failures are reported in sandboxd's words: what was being done
// (the step), what the registry said, and what to do about it. The
// underlying error stays reachable with errors.As/Is, but library texts
// ("HEAD responses have no body, use GET for details") are not repeated.

// newErr is a *toolerr.Error whose message is msg and whose cause is err
// (kept for errors.Is/As, not printed).
func newErr(code toolerr.Code, err error, format string, a ...any) *toolerr.Error {
	return &toolerr.Error{Code: code, Message: fmt.Sprintf(format, a...), Err: err}
}

// ctxError reports the caller's deadline or cancellation, naming the step
// that was running when it struck.
func ctxError(ctx context.Context, step string) *toolerr.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return newErr(toolerr.DeadlineExceeded, ctx.Err(), "deadline exceeded while %s", step)
	}
	return newErr(toolerr.Cancelled, ctx.Err(), "cancelled while %s", step)
}

// stepTimeout is the cause of a registry request cancelled by its own
// deadline (OCIConfig.WithRequestTimeout): no answer, or no bytes, for d.
type stepTimeout struct {
	step string
	d    time.Duration
}

func (e *stepTimeout) Error() string {
	return fmt.Sprintf("%s: no answer for %s", e.step, e.d)
}

func (e *stepTimeout) toolErr() *toolerr.Error {
	return newErr(toolerr.DeadlineExceeded, context.DeadlineExceeded,
		"registry request timed out while %s: no answer for %s (the per-request deadline, --registry-timeout)", e.step, e.d)
}

// dockerConfigPath is the docker config file the default keychain reads.
func dockerConfigPath() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".docker", "config.json")
	}
	return "~/.docker/config.json"
}

// authInfo says what credentials a registry request carried.
type authInfo struct {
	registry  string
	anonymous bool
	push      bool
}

func (a authInfo) denied(status int, step string, err error) *toolerr.Error {
	cfg := dockerConfigPath()
	switch {
	case status == http.StatusUnauthorized && a.anonymous:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s requires credentials and none were found for it (consulted the docker config %s and its credential helpers; run `docker login %s` or `oras login %s`)", step, a.registry, cfg, a.registry, a.registry)
	case status == http.StatusUnauthorized:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s rejected the credentials for it in the docker config %s (wrong user name, password or token?)", step, a.registry, cfg)
	case a.push:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: access denied: the credentials for %s in %s may not push to this repository", step, a.registry, cfg)
	case a.anonymous:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: access denied to anonymous pulls (no credentials for %s in the docker config %s)", step, a.registry, cfg)
	}
	return newErr(toolerr.ArtifactUnavailable, err, "%s: access denied: the credentials for %s in %s may not pull this repository", step, a.registry, cfg)
}

// registryError maps a registry or transport failure during step to an
// artifact-* error. attempts is how many times the request was sent (0:
// unknown).
func registryError(ctx context.Context, err error, step string, auth authInfo, attempts int) *toolerr.Error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	var st *stepTimeout
	if errors.As(context.Cause(ctx), &st) || errors.As(err, &st) {
		return st.toolErr()
	}
	if ctx.Err() != nil {
		return ctxError(ctx, step)
	}
	var he *transport.Error
	if errors.As(err, &he) {
		return statusError(err, he, step, auth, attempts)
	}
	var ue x509.UnknownAuthorityError
	var he2 x509.HostnameError
	var ce x509.CertificateInvalidError
	switch {
	case errors.As(err, &ue):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s presents a certificate signed by an unknown authority; trust its CA with --registry-ca FILE or /etc/docker/certs.d/%s/ca.crt (or SSL_CERT_FILE)", step, auth.registry, auth.registry)
	case errors.As(err, &he2):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: the certificate of %s is not valid for that name (%v)", step, auth.registry, he2.Error())
	case errors.As(err, &ce):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: the certificate of %s is invalid (%v)", step, auth.registry, ce.Error())
	}
	var pe *plainHTTPError
	if errors.As(err, &pe) {
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s", step, pe.Error())
	}
	switch {
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s speaks plain HTTP; for a loopback registry pass --insecure-registry %s", step, auth.registry, auth.registry)
	case strings.Contains(err.Error(), "http: server gave HTTP response") || strings.Contains(err.Error(), "malformed HTTP response"):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s did not answer HTTP (is it serving TLS? drop --insecure-registry for it)", step, auth.registry)
	}
	return newErr(toolerr.ArtifactUnavailable, err, "%s: %s is unreachable (%s)", step, auth.registry, netCause(err))
}

// netCause is the innermost, library-independent text of a network error.
func netCause(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		return msg[i+2:]
	}
	return msg
}

func statusError(err error, he *transport.Error, step string, auth authInfo, attempts int) *toolerr.Error {
	code := he.StatusCode
	for _, d := range he.Errors {
		switch d.Code {
		case transport.BlobUnknownErrorCode:
			return newErr(toolerr.ArtifactUnavailable, err, "%s: the registry lacks this blob (BLOB_UNKNOWN): the manifest names content that was never pushed or was deleted", step)
		case transport.ManifestUnknownErrorCode:
			return newErr(toolerr.ArtifactUnavailable, err, "%s: no such manifest (MANIFEST_UNKNOWN)", step)
		case transport.NameUnknownErrorCode:
			return newErr(toolerr.ArtifactUnavailable, err, "%s: no such repository (NAME_UNKNOWN)", step)
		case transport.DeniedErrorCode:
			return auth.denied(http.StatusForbidden, step, err)
		case transport.UnauthorizedErrorCode:
			if code != http.StatusForbidden {
				return auth.denied(http.StatusUnauthorized, step, err)
			}
		}
	}
	switch {
	case code == http.StatusBadRequest && strings.Contains(err.Error(), "HTTP request to an HTTPS server"):
		return newErr(toolerr.ArtifactUnavailable, err, "%s: %s serves TLS, not plain HTTP: drop --insecure-registry %s (trust a private CA with --registry-ca FILE)", step, auth.registry, auth.registry)
	case code == http.StatusNotFound:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: not found (404)", step)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return auth.denied(code, step, err)
	case (code == http.StatusTooManyRequests || code >= 500 && code != http.StatusNotImplemented) && attempts > 1:
		return newErr(toolerr.ArtifactUnavailable, err, "%s: the registry answered %d %s on all %d attempts (retried with backoff)", step, code, http.StatusText(code), attempts)
	}
	msg := http.StatusText(code)
	for _, d := range he.Errors {
		if d.Message != "" {
			msg = d.Message
			break
		}
	}
	return newErr(toolerr.ArtifactUnavailable, err, "%s: the registry answered %d (%s)", step, code, msg)
}

// attemptsKey carries a request's attempt counter from retryTransport.
type attemptsKey struct{}

// withAttempts returns ctx carrying a counter of the requests sent under
// it (the auth handshake pings two schemes at once: it is atomic).
func withAttempts(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, attemptsKey{}, n), n
}

func countAttempt(ctx context.Context) {
	if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}
