package server

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve answers on ln until ctx is done, then drains: the listener stays
// open and new invokes and /readyz answer 503 while accepted calls finish,
// for up to DrainTimeout; then the listener and connections close and Serve
// returns nil. (http.Server.Shutdown alone would close the listener at
// once.) It emits the listening, draining and stopped process events. Any
// other error from the listener is returned.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(slogWriter{s.log}, "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	port := 0
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		port = ta.Port
	}
	c := s.current()
	s.log.Info("listening", "port", port, "packId", c.packID, "artifactVersion", c.artifactVersion,
		"addr", ln.Addr().String(), "tools", len(c.order))
	c.release()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The drain bound is exact: calls, answers and connections all get
	// the same deadline, DrainTimeout after the signal, and nothing waits
	// past it.
	begun := time.Now()
	deadline := begun.Add(s.opts.DrainTimeout)
	if s.drainUntil(deadline) == 0 {
		// Every call is answered (and flushed: see handleInvoke). A short
		// graceful shutdown closes the idle keep-alive connections at once
		// and lets another route's answer being written finish; it does not
		// wait for a connection that never sends a request (http.Server
		// would, for 5 s), nor past the deadline.
		by := time.Now().Add(shutdownGrace)
		if deadline.Before(by) {
			by = deadline
		}
		sctx, cancel := context.WithDeadline(context.Background(), by)
		_ = hs.Shutdown(sctx)
		cancel()
	}
	// abandoned counts the calls whose answer had not been written when
	// the connections closed (their clients got none): not the calls still
	// running when the drain gave up, some of which may have answered in
	// between, and not the calls still running once Serve returned, since
	// a call cancelled by its closed connection can end before that (a
	// stopped event with abandoned 0 while the client got no answer). A
	// guest still stopping after its call was answered (at its deadline)
	// is counted apart: its client has its answer.
	abandoned := s.active.Load()
	_ = hs.Close()
	err := <-errc
	s.log.Info("stopped", "abandoned", abandoned, "guestsStopping", s.activeGuests.Load(),
		"drainMs", time.Since(begun).Milliseconds())
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdownGrace bounds the graceful part of closing the connections once
// every call is answered.
const shutdownGrace = 50 * time.Millisecond

// Drain stops admitting calls (new invokes and /readyz answer 503) and
// waits up to DrainTimeout for the calls already accepted, guests included:
// a call answered at its deadline still has a guest stopping, and its
// failed event comes when it has. It returns how many were still running
// when it gave up (0 when all finished). It emits the draining event.
// Calling it again waits again. Serve drains by itself.
func (s *Server) Drain() int { return s.drainUntil(time.Now().Add(s.opts.DrainTimeout)) }

// drainUntil is Drain with an absolute deadline.
func (s *Server) drainUntil(deadline time.Time) int {
	s.draining.Store(true)
	s.log.Info("draining", "inflight", s.active.Load(), "timeoutMs", s.opts.DrainTimeout.Milliseconds())
	done := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// Every call registered before draining was set is counted in
		// active now (Admit registers before it checks draining).
		for s.active.Load() > 0 {
			select {
			case <-s.drained:
			case <-stop:
				return
			}
		}
		// Pass the wake on: two drains at once (serve's SIGTERM and an
		// MCP session's) share the one signal the last call sends.
		select {
		case s.drained <- struct{}{}:
		default:
		}
		s.guests.Wait() // guests still stopping after their call was answered
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return 0
	case <-t.C:
		return int(max(s.active.Load(), s.activeGuests.Load()))
	}
}

// slogWriter routes net/http's own error log into process events.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn("http-error", "message", string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

// DrainTimeout is how long a drain waits for calls in flight (Options.DrainTimeout).
func (s *Server) DrainTimeout() time.Duration { return s.opts.DrainTimeout }
