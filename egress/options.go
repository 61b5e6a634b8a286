package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
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
	// Trace, when set, is called for each hop the policy admitted just
	// before it is sent, with its method and destination. It returns the
	// traceparent the hop carries ("" for none; a handler's own
	// traceparent and tracestate are always dropped) and a function called
	// once with the hop's status (0 when it failed) and error when its
	// answer's headers are in. Tracing (server's OpenTelemetry spans) sets it.
	Trace func(method string, dest Origin) (traceparent string, done func(status int, err error))
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
