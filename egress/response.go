package egress

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

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
