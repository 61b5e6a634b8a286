package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// byteBudget is a non-blocking semaphore counted in bytes: the memory of
// request bodies held at once. Every call charges it, so it is atomics,
// not a lock all calls share.
type byteBudget struct {
	used, peak atomic.Int64
	limit      int64
}

// tryAcquire takes n bytes if they fit.
func (b *byteBudget) tryAcquire(n int64) bool {
	for {
		u := b.used.Load()
		if n > b.limit-u {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *byteBudget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// stats returns the bytes held now and the most ever held.
func (b *byteBudget) stats() (used, peak int64) {
	return b.used.Load(), b.peak.Load()
}

// bodyCharge is what a body costs the budget per byte, at least: the body
// itself and the input parseFrame copies out of it. A route whose reader
// holds more copies says so (ReadBody's perByte).
const bodyCharge = 2

// bodyOverhead is charged once per body (headers of the decode, small
// copies) so that a flood of tiny bodies is counted too.
const bodyOverhead = 4 << 10

// chunkStep is how much buffer a chunked body (no Content-Length) is
// granted at a time.
const chunkStep = 64 << 10

var (
	// ErrBodyBudget: the body does not fit the byte budget (answer 503 +
	// Retry-After). Nothing of it was read.
	ErrBodyBudget = errors.New("request bodies in flight are at the byte budget")
	// ErrBodyDeadline: the body did not arrive by the body deadline
	// (Options.BodyTimeout); the connection cannot be read any more.
	ErrBodyDeadline = errors.New("the request body did not arrive by the body deadline")
	// errTooLarge: the body is over MaxBodyBytes (413). It is an
	// *http.MaxBytesError, the error http.MaxBytesReader returns, so that
	// any reader of a body (the MCP SDK's among them) knows it for a 413.
	errTooLarge error = &http.MaxBytesError{Limit: MaxBodyBytes}
	// ErrBodyNotMetered: ReadBody was given a request this Server's
	// ServeHTTP did not receive (a handler mounted somewhere else).
	ErrBodyNotMetered = errors.New("server: ReadBody on a request this Server is not serving (mount the handler with Handle)")
	// errBodyReleased: the body was read after its charge was given back.
	errBodyReleased = errors.New("request body read after its charge was released")
)

// requestBody is the body of every request the Server answers, whatever
// the route: ServeHTTP puts it in place of r.Body before the mux sees the
// request, so a route mounted later (Handle) cannot forget it. It is the
// one place where
//   - a body is charged to the byte budget before a byte of it is read:
//     with a Content-Length, the whole body (perByte × length +
//     bodyOverhead) at the first Read; a chunked body in steps (chunkStep,
//     then doubling), each charged before it is read. A charge that does
//     not fit fails the Read with ErrBodyBudget and reads nothing;
//   - a body is held to its deadline: the connection's read deadline is
//     set to the request's start + BodyTimeout before the handler runs,
//     and lifted once the body is in (io.EOF), so that net/http's
//     background read, which notices a disconnect, is not cut by it;
//   - a body is cut at MaxBodyBytes (errTooLarge) whatever the route.
//
// The charge is held until the handler returns, or, once keep was called,
// until the function keep returned is called (a guest run outlives its
// handler). Read, keep and readAll are for the handler's goroutine.
type requestBody struct {
	src io.ReadCloser
	s   *Server
	// rc is the response's controller (a value: no allocation of its
	// own); handleInvoke flushes its answer through it too.
	rc      http.ResponseController
	length  int64 // Content-Length, -1 when chunked
	perByte int64
	limit   int64 // the most it may be: MaxBodyBytes, or a route's lower cap
	// deadline is when the body must be in; byCall is set when the
	// call's own deadline (earlier than BodyTimeout's) is the one.
	deadline time.Time
	byCall   bool

	started  bool  // the first charge was taken
	allowed  int64 // body bytes the charge covers
	n        int64 // body bytes read
	held     atomic.Int64
	released atomic.Bool
	kept     bool
	eof      bool
	err      error // sticky: the first failure
}

// meterBody installs a requestBody on r (nil when r has no body) and
// returns the request the handlers see: a shallow copy, so that net/http's
// own request keeps its body and decides as it always does what to do
// with an unread remainder (discard a small one, under the body deadline;
// close the connection after a large one).
func (s *Server) meterBody(w http.ResponseWriter, r *http.Request, start time.Time) (*requestBody, *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, r
	}
	// The body and the request copy are one allocation.
	m := &meteredRequest{body: requestBody{src: r.Body, s: s, rc: *http.NewResponseController(w), length: r.ContentLength,
		perByte: bodyCharge, limit: MaxBodyBytes, deadline: start.Add(s.opts.BodyTimeout)}}
	rb := &m.body
	_ = rb.rc.SetReadDeadline(rb.deadline) // ErrNotSupported on a recorder
	m.req = *r
	m.req.Body = rb
	return rb, &m.req
}

// meteredRequest is what meterBody allocates per request: the metered
// body and the shallow copy of the request that reads it.
type meteredRequest struct {
	body requestBody
	req  http.Request
}

// bodyOf returns the requestBody ServeHTTP installed on r, or nil.
func bodyOf(r *http.Request) *requestBody {
	rb, _ := r.Body.(*requestBody)
	return rb
}

// Read reads the body within its charge, taking the next charge first
// when the bytes read have reached it.
func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.n == b.allowed {
		if err := b.grow(); err != nil {
			return 0, err
		}
	}
	if room := b.allowed - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.src.Read(p)
	b.n += int64(n)
	switch {
	case b.n > b.limit:
		return n, b.fail(b.tooLarge())
	case err == io.EOF:
		b.eof = true
		// The body is in: its deadline no longer applies (the next
		// request on the connection gets its own from net/http).
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		return n, b.fail(err)
	}
	return n, err
}

// Close closes the body (net/http's, which discards nothing itself).
func (b *requestBody) Close() error { return b.src.Close() }

func (b *requestBody) fail(err error) error {
	if b.err == nil {
		b.err = err
	}
	return b.err
}

// grow charges the next step of the body: all of it at the first call
// with a Content-Length, the next chunk of a chunked body.
func (b *requestBody) grow() error {
	if b.released.Load() {
		return b.fail(errBodyReleased)
	}
	var add, by int64
	if !b.started {
		add = bodyOverhead
		if b.length > b.limit {
			return b.fail(b.tooLarge())
		}
	}
	if b.length >= 0 {
		by = b.length - b.allowed // the whole body (0 once it is charged)
	} else {
		by = min(max(b.allowed, chunkStep), b.limit+1-b.allowed)
		if by <= 0 {
			return b.fail(b.tooLarge())
		}
	}
	add += b.perByte * by
	if !b.s.bodies.tryAcquire(add) {
		b.s.metrics.reject("body-budget")
		return b.fail(ErrBodyBudget)
	}
	b.held.Add(add)
	b.started = true
	b.allowed += by
	if b.length >= 0 && by == 0 {
		// The whole body is charged and read, yet no io.EOF came:
		// let the source say what follows.
		b.allowed = b.n + 1
	}
	return nil
}

// until brings the body deadline forward to t (the call's deadline) when
// t is earlier.
func (b *requestBody) until(t time.Time) {
	if t.Before(b.deadline) {
		b.deadline, b.byCall = t, true
		_ = b.rc.SetReadDeadline(t)
	}
}

// tooLarge is the error of a body over its limit.
func (b *requestBody) tooLarge() error {
	if b.limit == MaxBodyBytes {
		return errTooLarge
	}
	return &http.MaxBytesError{Limit: b.limit}
}

// charge takes the first charge now, at perByte budget bytes per body byte
// (never less than bodyCharge), for a body of at most limit bytes (never
// more than MaxBodyBytes; 0: MaxBodyBytes), before anything is read.
func (b *requestBody) charge(perByte, limit int64) error {
	if b.err != nil {
		return b.err
	}
	if !b.started {
		b.perByte = max(perByte, bodyCharge)
		if limit > 0 && limit < b.limit {
			b.limit = limit
		}
		return b.grow()
	}
	return nil
}

// readAll reads the whole body into one buffer: with a Content-Length the
// buffer is allocated once the whole charge is taken; a chunked body's
// buffer grows with its charge.
func (b *requestBody) readAll(perByte, limit int64) ([]byte, error) {
	if err := b.charge(perByte, limit); err != nil {
		return nil, err
	}
	if b.length >= 0 {
		buf := make([]byte, b.length)
		if _, err := io.ReadFull(b, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return buf, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if b.n == b.allowed {
				if err := b.grow(); err != nil {
					return nil, err
				}
			}
			nb := make([]byte, len(buf), b.allowed)
			copy(nb, buf)
			buf = nb
		}
		n, err := b.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// release gives the charge back, once; the body cannot be read after it.
func (b *requestBody) release() {
	if b.released.CompareAndSwap(false, true) {
		b.s.bodies.release(b.held.Swap(0))
	}
}

// keep hands the charge over to the caller: the handler's return no
// longer releases it, the returned releaser does (its release, once, from
// any goroutine). b is the releaser: an interface holding b, where the
// method value b.release was an allocation per call.
func (b *requestBody) keep() releaser {
	b.kept = true
	return b
}

// handlerDone is ServeHTTP's: the charge goes back unless it was kept.
func (b *requestBody) handlerDone() {
	if !b.kept {
		b.release()
	}
}

// ReadBody reads the whole body of r, a request this Server is serving
// (a handler mounted with Handle), within the limits every body has:
// charged to the byte budget at perByte budget bytes per body byte (never
// less than the pack protocol's 2) before a byte of it is read, cut at
// limit bytes (0, or over MaxBodyBytes: MaxBodyBytes) and at the body
// deadline. The charge is held until the
// handler returns. Errors: ErrBodyBudget (answer 503 + Retry-After),
// a *http.MaxBytesError (413), ErrBodyDeadline (the connection's read
// deadline passed; close it), or the read error of a client that went
// away; ErrBodyNotMetered for a request this Server is not serving.
//
// A handler that reads r.Body itself gets the same limits; ReadBody
// charges the whole body before its first read, so that a body that does
// not fit is known before anything else is done with the request.
func (s *Server) ReadBody(r *http.Request, perByte, limit int64) ([]byte, error) {
	b := bodyOf(r)
	if b == nil {
		if r.Body == nil || r.Body == http.NoBody {
			return nil, nil
		}
		return nil, ErrBodyNotMetered
	}
	buf, err := b.readAll(perByte, limit)
	var mbe *http.MaxBytesError
	if err != nil && !errors.Is(err, ErrBodyBudget) && !errors.As(err, &mbe) &&
		(errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(b.deadline)) {
		err = fmt.Errorf("%w (%d ms): %w", ErrBodyDeadline, s.opts.BodyTimeout.Milliseconds(), err)
	}
	return buf, err
}

// BodyTimeout is the body deadline: how long a request body may take to
// arrive (Options.BodyTimeout, defaulted).
func (s *Server) BodyTimeout() time.Duration { return s.opts.BodyTimeout }

// BodyBytes reports the request-body bytes charged to the budget now and
// the most ever charged at once (for tests and operators).
func (s *Server) BodyBytes() (inFlight, peak int64) { return s.bodies.stats() }

// A refused over-limit body is read on and thrown away, at most
// discardMax more bytes for at most discardTime, before the 413, so that a
// client that writes its whole body before it reads (Python's urllib and
// requests) reads the 413 instead of a connection reset: closing a socket
// with unread data makes the kernel answer with RST. What is left past
// discardMax must fit in the socket buffers for the client to finish its
// write, so the bound is a few times the cap, not a little over it; the
// time bound is what holds a slow client.
const (
	discardMax  = 4 * MaxBodyBytes
	discardTime = 2 * time.Second
)

// refuseTooLarge answers 413 for a body over MaxBodyBytes and closes the
// connection after it. The body's budget charge is given back first: the
// discard holds no budget, reads net/http's body directly through
// io.Discard's small pooled buffer (no memory that grows with the body),
// and ends at its own read deadline however slowly the client writes.
func refuseTooLarge(w http.ResponseWriter, r *http.Request) {
	src := r.Body
	if b := bodyOf(r); b != nil {
		b.release()
		src = b.src
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(discardTime))
	_, _ = io.CopyN(io.Discard, src, discardMax)
	w.Header().Set("Connection", "close")
	transportError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes))
}
