package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Retry policy of registry requests: up to retryAttempts tries, waiting
// retryBase, 2×, 4×… between them, or what Retry-After asks (at most
// maxRetryAfter). A wait that would pass the caller's deadline is not taken.
const (
	retryAttempts = 4
	retryBase     = 100 * time.Millisecond
	maxRetryAfter = 10 * time.Second
)

// retryTransport retries idempotent requests on 429, 5xx (except 501) and
// connection-level failures, with backoff, honouring the request's context.
type retryTransport struct {
	inner http.RoundTripper
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		countAttempt(ctx)
		resp, err := t.inner.RoundTrip(req)
		if attempt >= retryAttempts || (req.Body != nil && req.GetBody == nil) || ctx.Err() != nil {
			return resp, err
		}
		wait := retryBase << (attempt - 1)
		switch {
		case err != nil:
			if !retryableErr(err) {
				return resp, err
			}
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented:
			if ra := retryAfter(resp); ra > 0 {
				wait = min(ra, maxRetryAfter)
			}
		default:
			return resp, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			req = req.Clone(ctx)
			req.Body = body
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}

func retryableErr(err error) bool {
	var pe *plainHTTPError
	if errors.As(err, &pe) {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func retryAfter(resp *http.Response) time.Duration {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// schemeGuard refuses plain-HTTP requests to hosts that are not configured
// as insecure registries: credentials and code never travel in the clear
// unless the operator asked for it, and then only to loopback.
type schemeGuard struct {
	inner    http.RoundTripper
	insecure map[string]bool
}

type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("refusing plain HTTP to %s (pass --insecure-registry %s for a loopback registry without TLS)", e.host, e.host)
}

// errInsecureTLS fails the https half of go-containerregistry's auth ping
// to an --insecure-registry host at once. Every request to such a host goes
// over plain HTTP (name.Insecure), so the https attempt could only cost a
// TCP connect, a failed TLS handshake and the load of the system root pool
// (together 30-60 ms on the critical path of every push and pull).
var errInsecureTLS = errors.New("not tried: --insecure-registry hosts are reached over plain HTTP")

func (g *schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "https" && g.insecure[req.URL.Host] && req.URL.Path == "/v2/" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errInsecureTLS
	}
	if req.URL.Scheme != "https" && !g.insecure[req.URL.Host] {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &plainHTTPError{host: req.URL.Host}
	}
	return g.inner.RoundTrip(req)
}

// checkRedirect follows at most 5 redirects and never from https to http.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if req.URL.Scheme == "http" && via[0].URL.Scheme == "https" {
		return fmt.Errorf("refusing the redirect from https to %s", req.URL.Redacted())
	}
	return nil
}

// realmPath is where realmRewriter points a rewritten token realm: a path
// on the registry's own host and scheme, mapped back to the real realm.
const realmPath = "/.sandboxd-token-realm/"

// realmRewriter lets a registry on a loopback address use a token realm on
// another loopback address (another port: a local token server), which
// go-containerregistry's SSRF guard refuses. It rewrites such a realm in
// WWW-Authenticate challenges to a path on the registry's own host and
// scheme, and sends requests for that path to the real realm. A realm on
// any other host, or one that would downgrade https to http, is left
// alone (and so still refused).
type realmRewriter struct {
	inner http.RoundTripper

	mu     sync.Mutex
	realms map[string]*url.URL
}

func (t *realmRewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	if key, ok := strings.CutPrefix(req.URL.Path, realmPath); ok {
		t.mu.Lock()
		real := t.realms[key]
		t.mu.Unlock()
		if real != nil {
			u := *req.URL
			u.Scheme, u.Host, u.Path, u.RawPath = real.Scheme, real.Host, real.Path, real.RawPath
			req = req.Clone(req.Context())
			req.URL, req.Host = &u, ""
		}
	}
	resp, err := t.inner.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	if vs := resp.Header.Values("WWW-Authenticate"); len(vs) > 0 {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = t.rewrite(v, req.URL)
		}
		resp.Header["Www-Authenticate"] = out
	}
	return resp, nil
}

// rewrite replaces a loopback realm="…" of a Bearer challenge from the
// loopback registry at reg.
func (t *realmRewriter) rewrite(challenge string, reg *url.URL) string {
	if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(challenge)), "bearer ") {
		return challenge
	}
	i := strings.Index(challenge, `realm="`)
	if i < 0 {
		return challenge
	}
	j := strings.IndexByte(challenge[i+7:], '"')
	if j < 0 {
		return challenge
	}
	realm, err := url.Parse(challenge[i+7 : i+7+j])
	if err != nil || realm.Host == reg.Host || !loopbackHost(realm.Hostname()) || !loopbackHost(reg.Hostname()) {
		return challenge
	}
	if realm.Scheme != reg.Scheme && !(realm.Scheme == "https" && reg.Scheme == "http") {
		return challenge
	}
	sum := sha256.Sum256([]byte(realm.String()))
	key := hex.EncodeToString(sum[:8])
	t.mu.Lock()
	if t.realms == nil {
		t.realms = map[string]*url.URL{}
	}
	t.realms[key] = realm
	t.mu.Unlock()
	local := url.URL{Scheme: reg.Scheme, Host: reg.Host, Path: realmPath + key, RawQuery: realm.RawQuery}
	return challenge[:i+7] + local.String() + challenge[i+7+j:]
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
