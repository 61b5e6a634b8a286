package server

import "time"

// ParseTraceparentForTest exposes parseTraceparent's trace id.
func ParseTraceparentForTest(h string) string {
	id, _ := ParseTraceparent(h)
	return id
}

// SetGuestDoneHook sets the hook run after each guest's Invoke, before its
// slots are released (call it before serving).
func SetGuestDoneHook(s *Server, f func()) { s.guestDoneHook = f }

// AdmissionStats returns the calls running and waiting and the tenants
// the admission state holds.
func AdmissionStats(s *Server) (inflight, queued, tenants int) { return s.adm.stats() }

// Patterns lists the mux patterns the pack routes and Handle mounted, in
// order (for tests that cover every route).
func (s *Server) Patterns() []string { return append([]string(nil), s.patterns...) }

// SetGuestIdle sets how long guest workers wait for work before they exit
// (call it before serving).
func SetGuestIdle(s *Server, d time.Duration) { s.guestIdle = d }

// GuestWorkers returns the guest workers alive.
func GuestWorkers(s *Server) int64 { return s.guestWorkers.Load() }
