package server_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// TestGuestWorkerIdle: the guest worker a call started runs the next
// calls too while they keep coming (more often than its idle time), and
// exits its idle time after the last one, not before.
func TestGuestWorkerIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	server.SetGuestIdle(ts.Server, idle)
	body := invokeBody("acme.echo", `{"message":"hi"}`)
	// Calls every 100 ms for over three idle times: one worker throughout
	// (a worker that exited would be seen at 0 between the calls).
	end := time.Now().Add(4 * idle)
	for time.Now().Before(end) {
		wantResult(t, ts.invoke(t, body), "")
		time.Sleep(idle / 3)
		if n := server.GuestWorkers(ts.Server); n != 1 {
			t.Fatalf("%d guest workers while calls come every %v (idle %v), want 1", n, idle/3, idle)
		}
	}
	last := time.Now()
	wantResult(t, ts.invoke(t, body), "")
	for server.GuestWorkers(ts.Server) != 0 {
		if time.Since(last) > 10*idle {
			t.Fatalf("the guest worker did not exit %v after its last call", time.Since(last))
		}
		time.Sleep(idle / 30)
	}
	if d := time.Since(last); d < idle {
		t.Errorf("the guest worker exited %v after its last call, before its idle time %v", d, idle)
	}
}
