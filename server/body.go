package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
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

// bodyCharge is what a body costs the budget per byte of buffer: the body
// itself and the input parseFrame copies out of it.
const bodyCharge = 2

// bodyOverhead is charged once per body (headers of the decode, small
// copies) so that a flood of tiny bodies is counted too.
const bodyOverhead = 4 << 10

// chunkStep is how much buffer a chunked body (no Content-Length) is
// granted at a time.
const chunkStep = 64 << 10

var (
	// errOverBudget: the body does not fit the budget (503).
	errOverBudget = errors.New("request bodies in flight are over the byte budget")
	// errTooLarge: the body is over MaxBodyBytes (413).
	errTooLarge = errors.New("request body too large")
)

// bodyReader reads one request body within the budget. held is what it has
// charged; the caller releases it (once) when the call is over.
type bodyReader struct {
	budget   *byteBudget
	held     int64
	released atomic.Bool
}

// releaseOnce gives the charge back; calls after the first do nothing.
func (br *bodyReader) releaseOnce() {
	if br.released.CompareAndSwap(false, true) {
		br.budget.release(br.held)
	}
}

func (br *bodyReader) charge(n int64) bool {
	if !br.budget.tryAcquire(n) {
		return false
	}
	br.held += n
	return true
}

// read reads r's body. With a Content-Length the whole charge is taken
// before the first byte is read; a chunked body is charged before each
// growth of its buffer. It returns errOverBudget, errTooLarge, or the read
// error (a deadline, a disconnect).
func (br *bodyReader) read(r *http.Request) ([]byte, error) {
	if !br.charge(bodyOverhead) {
		return nil, errOverBudget
	}
	if n := r.ContentLength; n >= 0 {
		if n > MaxBodyBytes {
			return nil, errTooLarge
		}
		if !br.charge(bodyCharge * n) {
			return nil, errOverBudget
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
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
			grow := int64(min(max(cap(buf), chunkStep), MaxBodyBytes+1-cap(buf)))
			if grow <= 0 {
				return nil, errTooLarge
			}
			if !br.charge(bodyCharge * grow) {
				return nil, errOverBudget
			}
			nb := make([]byte, len(buf), cap(buf)+int(grow))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxBodyBytes {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// bodyDeadline is when the body must have arrived: the call's deadline or
// start+BodyTimeout, whichever is first. byCall reports which.
func (s *Server) bodyDeadline(start, callDeadline time.Time) (at time.Time, byCall bool) {
	b := start.Add(s.opts.BodyTimeout)
	if callDeadline.Before(b) {
		return callDeadline, true
	}
	return b, false
}

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
// connection after it. release (nil when nothing is held) gives the body's
// budget charge back first: the discard holds no budget, reads through
// io.Discard's small pooled buffer (no memory that grows with the body),
// and ends at its own read deadline however slowly the client writes.
func refuseTooLarge(w http.ResponseWriter, r *http.Request, release func()) {
	if release != nil {
		release()
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(discardTime))
	_, _ = io.CopyN(io.Discard, r.Body, discardMax)
	w.Header().Set("Connection", "close")
	transportError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes))
}
