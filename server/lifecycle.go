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
	abandoned := s.Drain()
	// Connections still busy after a drain that gave up are stuck in calls
	// that will not finish: close them at once instead of waiting again.
	grace := time.Second
	if abandoned > 0 {
		grace = 50 * time.Millisecond
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = hs.Shutdown(sctx)
	_ = hs.Close()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("stopped", "abandoned", abandoned)
	return nil
}

// Drain stops admitting calls (new invokes and /readyz answer 503) and
// waits up to DrainTimeout for the calls already accepted, guests included:
// a call answered at its deadline still has a guest stopping, and its
// failed event comes when it has. It returns how many were still running
// when it gave up (0 when all finished). It emits
// the draining event. Calling it again waits again.
func (s *Server) Drain() int {
	s.lifeMu.Lock()
	s.draining = true
	s.lifeMu.Unlock()
	s.log.Info("draining", "inflight", s.active.Load(), "timeoutMs", s.opts.DrainTimeout.Milliseconds())
	done := make(chan struct{})
	go func() {
		s.accepted.Wait()
		s.guests.Wait() // guests still stopping after their call was answered
		close(done)
	}()
	select {
	case <-done:
		return 0
	case <-time.After(s.opts.DrainTimeout):
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
