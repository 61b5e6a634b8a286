package egress

import (
	"net/http"
	"sort"
	"strings"
)

// maxPlaceholders caps the secret placeholders of one request: with the
// size cap applied to the placeholder form, it bounds what substitution adds.
const maxPlaceholders = 16

// SecretPlaceholder returns the header placeholder for secret name.
func SecretPlaceholder(name string) string { return "{{secret:" + name + "}}" }

// refusedHeaders are set by the transport, never by the caller.
var refusedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "keep-alive": true, "te": true, "trailer": true, "proxy-connection": true,
}

// partialHeaders are refused in a request carrying a secret placeholder.
var partialHeaders = []string{"Range", "If-Range", "Accept-Encoding"}

// credentialHeaders are dropped on a cross-origin redirect.
var credentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// buildHeader validates caller headers: token names, no CR, LF or NUL in
// values, no hop-by-hop or framing headers. It returns the header and the
// names whose values hold secret placeholders (never one in literal, nor
// one a literal entry of the same canonical name overwrote).
// traceHeaders are the W3C trace-context headers: a handler's are dropped,
// and the session sets traceparent itself when Options.Trace gives one.
var traceHeaders = map[string]bool{"traceparent": true, "tracestate": true}

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
		if traceHeaders[lk] {
			continue // the host's own (Options.Trace): a guest never sets a call's trace context
		}
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
