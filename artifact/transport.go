package artifact

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
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

func (g *schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
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
