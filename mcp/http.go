package mcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
)

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// AllowedOrigins are browser origins (scheme://host[:port], exact)
	// admitted besides loopback ones (localhost, 127.0.0.0/8, ::1). A
	// request without an Origin header (not from a browser) is admitted.
	AllowedOrigins []string
	// MaxBodyBytes caps a request body (default, and at most,
	// server.MaxBodyBytes, every route's cap); a larger one is refused with
	// 413, unread when it says its length.
	MaxBodyBytes int64
}

// Handler returns the Streamable HTTP endpoint (mount it at /mcp with
// server.Server.Handle: its bodies are read through the core's body
// meter, which only a request the core serves has). Before the SDK sees a
// request it checks, in order: the Origin (403 unless absent, loopback or
// allowed), the bearer token (Authorization: Bearer <the pack token>,
// compared in constant time; 401 with WWW-Authenticate), draining (503
// with Retry-After) and the body cap (413); then it reads the body with
// server.Server.ReadBody: charged to the core's byte budget before a byte
// is read (503 with Retry-After when it does not fit), cut at the cap
// (413) and at the body deadline (408). The SDK handler reads the body
// from memory; it is stateless (no Mcp-Session-Id; the 2026-07-28
// revision and the 2025-11-25 initialize handshake on the same endpoint),
// answers POST only (GET and DELETE: 405), refuses a loopback request
// whose Host is not a loopback name (403, DNS rebinding), and ties a
// 2026-07-28 call's context to its HTTP request (a closed stream cancels
// the guest). Being stateless, it serves a request that no initialize
// came before (and ignores an Mcp-Session-Id, which it never issues). An
// answer the SDK writes with JSON-RPC code 0 is re-encoded with a real
// code on its way out (codeZeroWriter).
func (s *Server) Handler(o HTTPOptions) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = server.MaxBodyBytes
	}
	allowed := map[string]bool{}
	for _, a := range o.AllowedOrigins {
		allowed[strings.TrimSuffix(strings.ToLower(a), "/")] = true
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk }, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		MaxRequestBodyBytes:          o.MaxBodyBytes,
		PropagateRequestCancellation: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !originOK(origin, allowed) {
			s.refuse(w, r, http.StatusForbidden, "origin", "the Origin "+clip(origin)+" is not allowed")
			return
		}
		if !s.bearerOK(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
			s.refuse(w, r, http.StatusUnauthorized, "token", "missing or wrong Authorization: Bearer token")
			return
		}
		if s.core.Draining() {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusServiceUnavailable, "draining", "draining")
			return
		}
		if r.ContentLength > o.MaxBodyBytes {
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("the body is over %d bytes", o.MaxBodyBytes))
			return
		}
		// The body is read here, through the core's meter (the one every
		// route's body goes through: the byte budget, charged before a byte
		// is read, and the body deadline), so that each way it can fail
		// has its own answer; the SDK then reads it from memory.
		body, err := s.core.ReadBody(r, bodyCharge, o.MaxBodyBytes)
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe): // a chunked body over the cap
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("the body is over %d bytes", mbe.Limit))
			return
		case errors.Is(err, server.ErrBodyBudget):
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusServiceUnavailable, "body-budget", "over capacity: request bodies in flight are at the byte budget")
			return
		case errors.Is(err, server.ErrBodyDeadline):
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusRequestTimeout, "body-deadline",
				fmt.Sprintf("the request body did not arrive within %d ms (the body deadline)", s.core.BodyTimeout().Milliseconds()))
			return
		case errors.Is(err, server.ErrBodyNotMetered):
			s.log.Error("internal-error", "error", err.Error())
			s.refuse(w, r, http.StatusInternalServerError, "not-mounted", "internal error")
			return
		case err != nil:
			return // the client went away mid-body: nobody to answer
		}
		if body != nil {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		h.ServeHTTP(codeZeroWriter{w}, r)
	})
}

// bodyCharge is what an MCP body costs the core's byte budget per byte:
// the SDK copies a body it reads twice (io.ReadAll, whose buffer grows by
// copying, once to peek at it and once to serve it) and decodes it, beside
// the copy read here: the request path's heap peaks at 4.8-5.0× an 8 MiB
// body (TestG02MCPBodyCharge, which fails if a newer SDK holds more).
const bodyCharge = 6

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, why, reason string) {
	s.log.Info("mcp-http-refused", "status", status, "why", why, "method", r.Method)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, reason+"\n")
}

// bearerOK reports whether r carries exactly one Authorization header
// "Bearer <the pack token>".
func (s *Server) bearerOK(r *http.Request) bool {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return s.core.CheckToken(strings.TrimSpace(tok))
}

// originOK admits an allowed origin or a loopback one.
func originOK(origin string, allowed map[string]bool) bool {
	if allowed[strings.ToLower(origin)] {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
