package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Resolver resolves a host name to addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc opens a connection to address, an "ip:port" that has passed the
// policy. (*net.Dialer).DialContext satisfies it.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Memory is the invocation's memory budget (memMB); *limits.Account
// satisfies it. Host-side buffers — request bodies, response headers, read
// buffers — are reserved while held.
type Memory interface {
	Reserve(n int64) bool
	Release(n int64)
}

// Limits are the per-session (per-invocation) budgets. Zero fields take the
// defaults of DefaultLimits.
type Limits struct {
	// MaxRequests caps HTTP exchanges, redirect hops included.
	MaxRequests int
	// MaxBodyBytes caps request plus response body bytes.
	MaxBodyBytes int64
	// MaxRequestHeaderBytes caps one request's header bytes (names and
	// values as the caller wrote them, secret placeholders unexpanded: a
	// check on the substituted size would tell the caller a secret's length).
	MaxRequestHeaderBytes int
	// MaxResponseHeaderBytes caps one response's header bytes.
	MaxResponseHeaderBytes int
	// RequestTimeout caps one request, from sending it until the response
	// is closed; it is always bounded by the caller's context deadline.
	RequestTimeout time.Duration
	// MaxConns caps connections in use at once: responses not yet closed.
	MaxConns int
}

// DefaultLimits are the budgets used for zero Limits fields.
var DefaultLimits = Limits{
	MaxRequests:            64,
	MaxBodyBytes:           32 << 20,
	MaxRequestHeaderBytes:  64 << 10,
	MaxResponseHeaderBytes: 64 << 10,
	RequestTimeout:         30 * time.Second,
	MaxConns:               8,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxRequests > 0 {
		d.MaxRequests = l.MaxRequests
	}
	if l.MaxBodyBytes > 0 {
		d.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxRequestHeaderBytes > 0 {
		d.MaxRequestHeaderBytes = l.MaxRequestHeaderBytes
	}
	if l.MaxResponseHeaderBytes > 0 {
		d.MaxResponseHeaderBytes = l.MaxResponseHeaderBytes
	}
	if l.RequestTimeout > 0 {
		d.RequestTimeout = l.RequestTimeout
	}
	if l.MaxConns > 0 {
		d.MaxConns = l.MaxConns
	}
	return d
}

// MaxRedirects is the most redirects one request follows.
const MaxRedirects = 5

// Options configure a Session. The zero value uses the system resolver, a
// plain TCP dialer, the system roots and DefaultLimits.
type Options struct {
	Resolver Resolver
	Dial     DialFunc
	// AllowRanges are operator ranges (--egress-allow-cidr) whose addresses
	// may be reached although their class is denied by default.
	AllowRanges []netip.Prefix
	// TLSConfig is cloned for https (nil: system roots).
	TLSConfig *tls.Config
	Limits    Limits
	// Memory, when set, is charged for host-side buffers.
	Memory Memory
	// Secret returns a declared secret's value for header substitution
	// (see Request.Header); nil means no secrets.
	Secret func(name string) (string, bool)
	// SecretDestinations binds secrets to destinations: a secret named
	// here is substituted only into requests whose origin one of its
	// entries matches (besides the policy admitting it); a secret not
	// named goes to any destination the allowlist admits.
	SecretDestinations SecretDestinations
}

// SecretDestinations maps a secret name to the destinations it may be sent
// to (`--secret-destination NAME=origin`), in the allowlist entry grammar.
type SecretDestinations map[string][]Entry

// ParseSecretDestinations parses NAME=entry specs, entry in the allowlist
// grammar ([scheme://]host[:port]); specs for one name accumulate.
func ParseSecretDestinations(specs []string) (SecretDestinations, error) {
	out := SecretDestinations{}
	for _, spec := range specs {
		name, ent, ok := strings.Cut(spec, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, "{} ") {
			return nil, fmt.Errorf("secret destination %q: want NAME=[scheme://]host[:port]", spec)
		}
		e, err := ParseEntry(strings.TrimSpace(ent))
		if err != nil {
			return nil, fmt.Errorf("secret destination for %s: %w", name, err)
		}
		out[name] = append(out[name], e)
	}
	return out, nil
}

// maxPlaceholders caps the secret placeholders of one request: with the
// size cap applied to the placeholder form, it bounds what substitution adds.
const maxPlaceholders = 16

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

// SecretPlaceholder returns the header placeholder for secret name.
func SecretPlaceholder(name string) string { return "{{secret:" + name + "}}" }

var allowedMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true,
}

// refusedHeaders are set by the transport, never by the caller.
var refusedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "keep-alive": true, "te": true, "trailer": true, "proxy-connection": true,
}

// partialHeaders are refused in a request carrying a secret placeholder.
var partialHeaders = []string{"Range", "If-Range", "Accept-Encoding"}

// credentialHeaders are dropped on a cross-origin redirect.
var credentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

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
		resp, err := s.transport.RoundTrip(req)
		if err != nil {
			e := s.mapErr(rctx, ctx, err, origin)
			s.update(idx, func(a *Attempt) {
				if a.Reason == "" {
					a.Reason = e.Msg
				}
			})
			return fail(e)
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

// buildHeader validates caller headers: token names, no CR, LF or NUL in
// values, no hop-by-hop or framing headers. It returns the header and the
// names whose values hold secret placeholders (never one in literal, nor
// one a literal entry of the same canonical name overwrote).
func (s *Session) buildHeader(in map[string]string, literal map[string]bool) (http.Header, map[string]bool, error) {
	h := make(http.Header, len(in))
	var secretNames map[string]bool
	names := make([]string, 0, len(in))
	for k := range in {
		names = append(names, k)
	}
	sort.Strings(names)
	total, placeholders := 0, 0
	for _, k := range names {
		v := in[k]
		if !isToken(k) {
			return nil, nil, newErr(ReasonInvalid, "invalid header name %q", truncate(k, 64))
		}
		lk := strings.ToLower(k)
		if refusedHeaders[lk] || strings.HasPrefix(lk, "proxy-") {
			return nil, nil, newErr(ReasonInvalid, "header %q is set by the host, not the handler", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, nil, newErr(ReasonInvalid, "header %q has a CR, LF or NUL in its value", k)
		}
		total += len(k) + len(v) + 4
		if !literal[k] {
			placeholders += strings.Count(v, "{{secret:")
		}
		if placeholders > maxPlaceholders {
			return nil, nil, newErr(ReasonInvalid, "the request has more than %d secret placeholders", maxPlaceholders)
		}
		if total > s.lim.MaxRequestHeaderBytes {
			return nil, nil, newErr(ReasonHeaderBudget, "the request headers are over the %d-byte cap", s.lim.MaxRequestHeaderBytes)
		}
		ck := http.CanonicalHeaderKey(k)
		h.Set(ck, v)
		if literal[k] {
			delete(secretNames, ck)
		} else if strings.Contains(v, "{{secret:") {
			if secretNames == nil {
				secretNames = map[string]bool{}
			}
			secretNames[ck] = true
		}
	}
	return h, secretNames, nil
}

// substitute replaces secret placeholders in the named headers of a request
// to o, after checking each secret's destination binding, and records the
// values for redaction. Errors name secrets, never values or their lengths.
func (s *Session) substitute(h http.Header, names map[string]bool, o Origin) *Error {
	for name := range names {
		v := h.Get(name)
		var out strings.Builder
		for {
			i := strings.Index(v, "{{secret:")
			if i < 0 {
				out.WriteString(v)
				break
			}
			j := strings.Index(v[i:], "}}")
			if j < 0 {
				return newErr(ReasonInvalid, "header %q has an unterminated secret placeholder", name)
			}
			secret := v[i+len("{{secret:") : i+j]
			val, ok := "", false
			if s.opts.Secret != nil {
				val, ok = s.opts.Secret(secret)
			}
			if !ok {
				return newErr(ReasonNotFound, "header %q names secret %q, which is not declared or has no value", name, truncate(secret, 64))
			}
			if strings.ContainsAny(val, "\r\n\x00") {
				return newErr(ReasonInvalid, "secret %q cannot go in a header (it contains CR, LF or NUL)", secret)
			}
			if dests, bound := s.opts.SecretDestinations[secret]; bound {
				ok := false
				for _, e := range dests {
					if e.matches(o) {
						ok = true
						break
					}
				}
				if !ok {
					return newErr(ReasonDenied, "secret %q may not be sent to %s: the operator binds it to other destinations", truncate(secret, 64), o)
				}
			}
			s.red.add(secret, val)
			out.WriteString(v[:i])
			out.WriteString(val)
			v = v[i+j+2:]
		}
		h.Set(name, out.String())
	}
	return nil
}

func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
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

// dial resolves the host once, classifies every address, and connects only
// to an address that passed.
func (s *Session) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ref, _ := ctx.Value(attemptKey{}).(attemptRef)
	setReason := func(r string) {
		if ref.s != nil {
			ref.s.update(ref.idx, func(a *Attempt) { a.Allowed, a.Reason = false, r })
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, newErr(ReasonInternal, "dial address %q: %v", addr, err)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = s.opts.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			setReason("DNS lookup failed")
			return nil, &Error{Reason: ReasonUnavailable, Msg: fmt.Sprintf("cannot resolve %s", host), Err: err}
		}
		if len(addrs) > 16 {
			addrs = addrs[:16]
		}
	}
	var passed []netip.Addr
	var denied []string
	for _, ip := range addrs {
		if c, ok := s.AddressAllowed(ref.entry, ip); ok {
			passed = append(passed, ip)
		} else {
			denied = append(denied, ip.String()+" ("+string(c)+")")
		}
	}
	if len(passed) == 0 {
		r := fmt.Sprintf("%s resolves only to denied addresses: %s", host, strings.Join(denied, ", "))
		if len(addrs) == 0 {
			r = fmt.Sprintf("%s has no addresses", host)
		}
		setReason(r)
		return nil, newErr(ReasonDenied, "%s", r)
	}
	var lastErr error
	for _, ip := range passed {
		target := net.JoinHostPort(ip.Unmap().WithZone("").String(), port)
		conn, err := s.opts.Dial(ctx, network, target)
		if err == nil {
			if ref.s != nil {
				ref.s.update(ref.idx, func(a *Attempt) { a.Allowed, a.Address = true, target })
			}
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	setReason("connect failed")
	return nil, lastErr
}

// AddressAllowed reports whether the session may connect to ip for a
// destination that entry admitted (Policy.Match): a public address, or one
// that entry itself names (an IP or CIDR entry, so only for that entry's
// scheme and port, never for a name another entry admits), or one inside an
// operator allow-range. It returns the address class either way.
func (s *Session) AddressAllowed(entry Entry, ip netip.Addr) (Class, bool) {
	c := Classify(ip)
	if c == ClassPublic {
		return c, true
	}
	if entry.namesAddress(ip) {
		return c, true
	}
	for _, p := range s.opts.AllowRanges {
		if p.Contains(ip) || p.Contains(ip.Unmap()) {
			return c, true
		}
	}
	return c, false
}

// Response is an open response. Read streams its body under the session's
// body budget; Close releases it. Safe for use by one goroutine at a time.
type Response struct {
	Status int
	Header http.Header
	// HeaderBytes is the size of Header as counted against the budget.
	HeaderBytes int

	s        *Session
	body     io.ReadCloser
	cancel   context.CancelFunc
	reserved int64
	idx      int
	read     int64
	err      *Error
	closed   bool
	closing  atomic.Bool
	mu       sync.Mutex

	// Redaction state: raw bytes that may begin a secret (carry), redacted
	// bytes not yet delivered (ready), and the memory held for both.
	carry, ready []byte
	scratch      []byte
	held         int64
	eof          bool
}

func (s *Session) newResponse(resp *http.Response, idx int, cancel context.CancelFunc, reserved int64) (*Response, error) {
	hb := headerBytes(resp.Header)
	if s.opts.Memory != nil {
		if !s.opts.Memory.Reserve(int64(hb)) {
			discard(resp.Body)
			cancel()
			s.opts.Memory.Release(reserved)
			// No size: the headers may reflect a secret.
			return nil, newErr(ReasonMemoryBudget, "the response headers do not fit in the memory budget")
		}
		reserved += int64(hb)
	}
	r := &Response{Status: resp.StatusCode, Header: s.red.header(resp.Header), HeaderBytes: hb, s: s, body: resp.Body, cancel: cancel, reserved: reserved, idx: idx}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = r.Close()
		return nil, newErr(ReasonInternal, "the invocation's egress session is closed")
	}
	s.open[r] = struct{}{}
	s.mu.Unlock()
	return r, nil
}

// readProbe is the size of the read used to tell "body ends exactly at the
// budget" from "body is over it".
const readProbe = 1

// Read reads body bytes into p. It returns io.EOF at the end, and an *Error
// when a budget runs out (ErrBodyBudget, ErrMemoryBudget), on timeout
// (ErrTimeout) or on a network failure (ErrUnavailable).
//
// Once the session substituted a secret, the body is redacted as it
// streams: every occurrence of a substituted value (RedactedMarker), also
// across read boundaries, for which Read holds back the bytes that could
// begin one. A body that ends or fails in the middle of a possible
// occurrence never delivers that tail. Budgets count the bytes received.
func (r *Response) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, newErr(ReasonBadHandle, "the response is closed")
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(r.ready) > 0 {
			n := copy(p, r.ready)
			r.ready = r.ready[n:]
			r.hold()
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		if r.eof {
			return 0, io.EOF
		}
		pats, maxLen := r.s.red.snapshot()
		if len(pats) == 0 && len(r.carry) == 0 {
			n, err := r.rawRead(p)
			if err == io.EOF {
				r.eof = true
			}
			return n, err
		}
		if len(r.scratch) < len(p) {
			r.scratch = make([]byte, min(len(p), 64<<10))
		}
		n, err := r.rawRead(r.scratch[:min(len(p), len(r.scratch))])
		r.carry = append(r.carry, r.scratch[:n]...)
		if err != nil && err != io.EOF {
			// A possible start of a secret is never delivered.
			r.carry = nil
			r.hold()
			return 0, err
		}
		final := err == io.EOF
		var used int
		r.ready, used = redactInto(nil, r.carry, pats, maxLen, final)
		r.carry = append(r.carry[:0], r.carry[used:]...)
		if final {
			r.eof, r.carry = true, nil
		}
		if e := r.hold(); e != nil {
			r.ready = nil
			return 0, e
		}
	}
}

// hold keeps the memory reservation equal to the redaction buffers.
func (r *Response) hold() *Error {
	want := int64(len(r.carry) + len(r.ready))
	m := r.s.opts.Memory
	switch {
	case m == nil:
	case want > r.held:
		if !m.Reserve(want - r.held) {
			r.err = newErr(ReasonMemoryBudget, "the response body's redaction buffer does not fit in the memory budget")
			return r.err
		}
	case want < r.held:
		m.Release(r.held - want)
	}
	r.held = want
	return nil
}

// rawRead reads received body bytes into p under the session's budgets.
func (r *Response) rawRead(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	s := r.s
	s.mu.Lock()
	remaining := s.lim.MaxBodyBytes - s.bodyBytes
	s.mu.Unlock()
	over := false
	if remaining <= 0 {
		over, p = true, p[:readProbe]
	} else if int64(len(p)) > remaining {
		p = p[:remaining]
	}
	if s.opts.Memory != nil {
		if !s.opts.Memory.Reserve(int64(len(p))) {
			r.err = newErr(ReasonMemoryBudget, "a read buffer of %d bytes does not fit in the memory budget", len(p))
			return 0, r.err
		}
		defer s.opts.Memory.Release(int64(len(p)))
	}
	n, err := r.body.Read(p)
	if over && n > 0 {
		r.err = newErr(ReasonBodyBudget, "the response body passes the invocation's %d-byte body budget", s.lim.MaxBodyBytes)
		return 0, r.err
	}
	if n > 0 {
		r.read += int64(n)
		s.mu.Lock()
		s.bodyBytes += int64(n)
		s.mu.Unlock()
		s.update(r.idx, func(a *Attempt) { a.ResponseBytes += int64(n) })
	}
	if err == io.EOF {
		return n, io.EOF
	}
	if err != nil {
		var e *Error
		switch {
		case errors.As(err, &e):
		case errors.Is(err, context.DeadlineExceeded):
			e = &Error{Reason: ReasonTimeout, Msg: "the response body did not arrive before the timeout", Err: context.DeadlineExceeded}
		case errors.Is(err, context.Canceled):
			e = &Error{Reason: ReasonTimeout, Msg: "the invocation was cancelled", Err: err}
		default:
			e = &Error{Reason: ReasonUnavailable, Msg: "reading the response body failed: " + err.Error(), Err: err}
		}
		r.err = e
		if n > 0 {
			return n, nil
		}
		return 0, e
	}
	return n, nil
}

// Close releases the response, its connection and its memory.
func (r *Response) Close() error {
	if !r.closing.CompareAndSwap(false, true) {
		return nil
	}
	// Abort a Read blocked on the network first, then wait for it.
	r.cancel()
	_ = r.body.Close()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	if r.s.opts.Memory != nil && r.reserved+r.held > 0 {
		r.s.opts.Memory.Release(r.reserved + r.held)
	}
	r.carry, r.ready, r.held = nil, nil, 0
	r.s.mu.Lock()
	delete(r.s.open, r)
	r.s.mu.Unlock()
	return nil
}

// HeadersMap returns the headers as {lower-case name: value}, multiple
// values joined with ", ".
func (r *Response) HeadersMap() map[string]string {
	out := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		out[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return out
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
