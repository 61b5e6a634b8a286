package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Session is the egress state of one invocation: its budgets, its open
// responses, its connections and its audit trail. Requests of one session
// never share connections with another. Methods are safe for concurrent
// use. Close it when the invocation ends.
type Session struct {
	policy    *Policy
	opts      Options
	lim       Limits
	transport *http.Transport

	mu        sync.Mutex
	requests  int
	bodyBytes int64
	open      map[*Response]struct{}
	closed    bool
	attempts  []Attempt
	dropped   int

	red redactor // values substituted so far
}

// NewSession starts the egress state of one invocation under policy p.
func NewSession(p *Policy, opts Options) *Session {
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	s := &Session{policy: p, opts: opts, lim: opts.Limits.withDefaults(), open: map[*Response]struct{}{}}
	var tc *tls.Config
	if opts.TLSConfig != nil {
		tc = opts.TLSConfig.Clone()
	}
	s.transport = &http.Transport{
		Proxy:                  nil, // never an environment proxy: the policy names the destination
		DialContext:            s.dial,
		TLSClientConfig:        tc,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: int64(s.lim.MaxResponseHeaderBytes),
		MaxConnsPerHost:        s.lim.MaxConns,
		MaxIdleConns:           s.lim.MaxConns,
		IdleConnTimeout:        30 * time.Second,
	}
	return s
}

// Close closes every open response and every connection of the session.
// Further requests fail.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	open := make([]*Response, 0, len(s.open))
	for r := range s.open {
		open = append(open, r)
	}
	s.mu.Unlock()
	for _, r := range open {
		_ = r.Close()
	}
	s.transport.CloseIdleConnections()
}

// Attempt is the audit record of one egress attempt (one hop), allowed or
// denied. It never holds a query string, a header value or a secret.
type Attempt struct {
	Method        string `json:"method"`
	URL           string `json:"url"` // scheme://host:port/path
	Hop           int    `json:"hop,omitempty"`
	Rule          string `json:"rule,omitempty"`    // the allowlist entry that matched
	Address       string `json:"address,omitempty"` // the address dialled
	Allowed       bool   `json:"allowed"`
	Reason        string `json:"reason,omitempty"` // why it was denied or failed
	Status        int    `json:"status,omitempty"`
	RequestBytes  int64  `json:"requestBytes,omitempty"`
	ResponseBytes int64  `json:"responseBytes,omitempty"`
}

// maxAttempts caps the audit trail of one session.
const maxAttempts = 256

// Attempts returns the audit trail so far, and how many attempts were left
// off past the cap.
func (s *Session) Attempts() ([]Attempt, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attempt(nil), s.attempts...), s.dropped
}

func (s *Session) record(a *Attempt) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.attempts) >= maxAttempts {
		s.dropped++
		return -1
	}
	s.attempts = append(s.attempts, *a)
	return len(s.attempts) - 1
}

func (s *Session) update(i int, fn func(a *Attempt)) {
	if i < 0 {
		return
	}
	s.mu.Lock()
	fn(&s.attempts[i])
	s.mu.Unlock()
}

// Request is one outbound request.
//
// A header value may contain placeholders "{{secret:NAME}}"; the session
// replaces each with the value of secret NAME (Options.Secret) only when the
// destination matched an allowlist entry and, when the operator bound NAME
// to destinations (Options.SecretDestinations), one of those, so the caller
// never holds the value. Such headers are dropped on a cross-origin
// redirect, as are Authorization, Cookie and Proxy-Authorization. Every
// value substituted is redacted, from then on, from what the session hands
// back: response headers and bodies, error messages (see Session.Redact).
type Request struct {
	Method string
	URL    string
	Header map[string]string
	// Literal names Header entries (spelled as there) sent as written:
	// never scanned for secret placeholders, for values holding text the
	// caller cannot vouch for (a declarative HTTP tool's input), so such
	// text can never name a secret. They are validated like the others.
	Literal map[string]bool
	Body    []byte
}

var allowedMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true,
}

type attemptKey struct{}

// Do sends r, following redirects (each hop re-checked against the policy,
// at most MaxRedirects, https → http refused), and returns the final
// response, which the caller must Close. Failures are *Error with the ABI
// error number for the guest.
func (s *Session) Do(ctx context.Context, r *Request) (*Response, error) {
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = "GET"
	}
	if !allowedMethods[method] {
		return nil, newErr(ReasonInvalid, "method %q is not allowed", r.Method)
	}
	u, origin, err := ParseURL(r.URL)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalid, Msg: err.Error(), Err: err}
	}
	hdr, secretNames, err := s.buildHeader(r.Header, r.Literal)
	if err != nil {
		return nil, err
	}
	if len(secretNames) > 0 {
		// A request carrying a secret may not ask for a part of the answer
		// or an encoding of it: a reflected value would come back split
		// (Range) or compressed, past exact-match redaction.
		for _, h := range partialHeaders {
			if hdr.Get(h) != "" {
				return nil, newErr(ReasonInvalid, "header %q cannot go in a request that carries a secret placeholder", h)
			}
		}
	}
	if s.policy.kind == KindNone {
		a := &Attempt{Method: method, URL: auditURL(u, origin), Reason: "network policy is none"}
		s.record(a)
		return nil, newErr(ReasonDenied, "network egress is denied: the tool's network policy is none")
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, newErr(ReasonInternal, "the invocation's egress session is closed")
	case len(s.open) >= s.lim.MaxConns:
		s.mu.Unlock()
		return nil, newErr(ReasonConnBudget, "%d responses are open, the most this invocation may hold; close one first", s.lim.MaxConns)
	}
	s.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, s.lim.RequestTimeout)
	body := r.Body
	var reserved int64
	release := func() {
		if reserved > 0 && s.opts.Memory != nil {
			s.opts.Memory.Release(reserved)
		}
		reserved = 0
	}
	fail := func(err error) (*Response, error) {
		release()
		cancel()
		return nil, s.redactErr(err)
	}
	if len(body) > 0 && s.opts.Memory != nil {
		if !s.opts.Memory.Reserve(int64(len(body))) {
			return fail(newErr(ReasonMemoryBudget, "a request body of %d bytes does not fit in the memory budget", len(body)))
		}
		reserved = int64(len(body))
	}
	for hop := 0; ; hop++ {
		a := &Attempt{Method: method, URL: auditURL(u, origin), Hop: hop}
		entry, ok := s.policy.Match(origin)
		if !ok {
			a.Reason = "no network.hosts entry matches " + origin.String()
			s.record(a)
			what := "the destination"
			if hop > 0 {
				what = "the redirect destination"
			}
			return fail(newErr(ReasonDenied, "%s %s is not allowed by the tool's network policy", what, origin))
		}
		a.Rule = entry.String()
		if len(secretNames) > 0 && s.policy.kind != KindAllowlist {
			a.Reason = "secret placeholders need an allowlisted destination"
			s.record(a)
			return fail(newErr(ReasonDenied, "secret placeholders are substituted only for allowlisted destinations"))
		}
		if err := s.chargeRequest(len(body)); err != nil {
			a.Reason = err.Msg
			s.record(a)
			return fail(err)
		}
		a.RequestBytes = int64(len(body))
		idx := s.record(a)
		req, err := http.NewRequestWithContext(context.WithValue(rctx, attemptKey{}, attemptRef{s, idx, entry}), method, u.String(), nil)
		if err != nil {
			return fail(newErr(ReasonInvalid, "cannot build the request: %v", stripURLFromErr(err)))
		}
		if len(body) > 0 {
			b := body
			req.ContentLength = int64(len(b))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(b))), nil }
			req.Body, _ = req.GetBody()
		}
		req.Header = hdr.Clone()
		if len(secretNames) > 0 {
			if err := s.substitute(req.Header, secretNames, origin); err != nil {
				s.update(idx, func(a *Attempt) { a.Allowed, a.Reason = false, err.Msg })
				return fail(err)
			}
		}
		var traced func(int, error)
		if s.opts.Trace != nil {
			var tp string
			if tp, traced = s.opts.Trace(method, origin); tp != "" {
				req.Header.Set("Traceparent", tp)
			}
		}
		resp, err := s.transport.RoundTrip(req)
		if err != nil {
			e := s.mapErr(rctx, ctx, err, origin)
			if traced != nil {
				traced(0, e)
			}
			s.update(idx, func(a *Attempt) {
				if a.Reason == "" {
					a.Reason = e.Msg
				}
			})
			return fail(e)
		}
		if traced != nil {
			traced(resp.StatusCode, nil)
		}
		s.update(idx, func(a *Attempt) { a.Status, a.Allowed = resp.StatusCode, true })
		if enc := resp.Header.Get("Content-Encoding"); len(secretNames) > 0 && enc != "" && !strings.EqualFold(enc, "identity") {
			// The transport undoes only the gzip it asked for itself.
			discard(resp.Body)
			s.update(idx, func(a *Attempt) { a.Reason = "encoded response to a request carrying a secret" })
			return fail(newErr(ReasonUnavailable, "the response is content-encoded (%.32q), so it cannot be checked for secret values; it is refused", enc))
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" {
			return s.newResponse(resp, idx, cancel, reserved)
		}
		discard(resp.Body)
		if hop == MaxRedirects {
			return fail(newErr(ReasonRedirect, "more than %d redirects", MaxRedirects))
		}
		next, err := u.Parse(loc)
		if err != nil {
			return fail(newErr(ReasonUnavailable, "the server sent an invalid redirect Location"))
		}
		nu, norigin, perr := ParseURL(next.String())
		if perr != nil {
			return fail(&Error{Reason: ReasonRedirect, Msg: "refused redirect: " + perr.Error()})
		}
		if origin.Scheme == "https" && norigin.Scheme == "http" {
			return fail(newErr(ReasonRedirect, "refused redirect from https to http (%s)", norigin))
		}
		if !norigin.Same(origin) {
			for _, h := range credentialHeaders {
				hdr.Del(h)
			}
			for name := range secretNames {
				hdr.Del(name)
			}
			secretNames = nil
		}
		switch resp.StatusCode {
		case http.StatusSeeOther:
			if method != "HEAD" {
				method = "GET"
			}
			body = nil
		case http.StatusMovedPermanently, http.StatusFound:
			if method == "POST" {
				method, body = "GET", nil
			}
		}
		if body == nil {
			hdr.Del("Content-Type")
		}
		u, origin = nu, norigin
	}
}

type attemptRef struct {
	s     *Session
	idx   int
	entry Entry // the allowlist entry that admitted the hop's origin
}

func isRedirect(code int) bool {
	switch code {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}

// discard drains a little of a redirect body so the connection can be
// reused, then closes it.
func discard(b io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, b, 4<<10)
	_ = b.Close()
}

func (s *Session) chargeRequest(bodyLen int) *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.requests >= s.lim.MaxRequests {
		return newErr(ReasonRequestBudget, "this invocation already made %d requests, the most it may make", s.lim.MaxRequests)
	}
	if s.bodyBytes+int64(bodyLen) > s.lim.MaxBodyBytes {
		return newErr(ReasonBodyBudget, "a request body of %d bytes would pass the invocation's %d-byte body budget", bodyLen, s.lim.MaxBodyBytes)
	}
	s.requests++
	s.bodyBytes += int64(bodyLen)
	return nil
}

func auditURL(u *url.URL, o Origin) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	return o.String() + p
}

// mapErr turns a transport error into an *Error.
func (s *Session) mapErr(rctx, parent context.Context, err error, o Origin) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case parent.Err() != nil:
		if errors.Is(parent.Err(), context.Canceled) {
			return &Error{Reason: ReasonTimeout, Msg: "the invocation was cancelled", Err: err}
		}
		return &Error{Reason: ReasonTimeout, Msg: "the invocation's deadline passed during the request", Err: context.DeadlineExceeded}
	case rctx.Err() != nil:
		return &Error{Reason: ReasonTimeout, Msg: fmt.Sprintf("the request to %s timed out", o), Err: context.DeadlineExceeded}
	case strings.Contains(err.Error(), "server response headers exceeded"):
		return &Error{Reason: ReasonHeaderBudget, Msg: fmt.Sprintf("the response headers from %s are over the %d-byte cap", o, s.lim.MaxResponseHeaderBytes), Err: err}
	}
	return &Error{Reason: ReasonUnavailable, Msg: fmt.Sprintf("the request to %s failed: %v", o, stripURLFromErr(err)), Err: err}
}

// Redact returns msg with every secret value the session substituted (and
// its common encodings) replaced by RedactedMarker: callers pass anything
// derived from a response or an error through it before showing it.
func (s *Session) Redact(msg string) string { return s.red.String(msg) }

// redactErr redacts the message of an *Error.
func (s *Session) redactErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		if m := s.red.String(e.Msg); m != e.Msg {
			c := *e
			c.Msg = m
			return &c
		}
	}
	return err
}
