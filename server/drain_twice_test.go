package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// TestTwoDrainsShareTheLastCall runs two drains at once (serve's SIGTERM and
// an MCP session's Drain on one core) while a call is admitted: when the
// call's ticket closes, both must end at once. The last call sends one wake;
// a drain that took it without passing it on left the other waiting out its
// whole drain timeout.
func TestTwoDrainsShareTheLastCall(t *testing.T) {
	exec := newExecutor(t, executor.NewConfig())
	srv, err := server.New(context.Background(), exec, server.StaticSource{Tools: []server.StaticTool{
		tool(t, "t.echo", "echo_reactor", 16, 1000, nil),
	}}, server.Options{Token: token, DrainTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	ticket, refusal := srv.Admit()
	if ticket == nil {
		t.Fatalf("Admit refused: %v", refusal)
	}
	ended := make(chan int, 2)
	for range 2 {
		go func() { ended <- srv.Drain() }()
	}
	time.Sleep(100 * time.Millisecond) // both drains wait on the call
	if !srv.Draining() {
		t.Fatal("not draining")
	}
	start := time.Now()
	ticket.Close()
	for i := range 2 {
		select {
		case n := <-ended:
			t.Logf("drain %d ended %v after the ticket closed, %d left", i+1, time.Since(start), n)
			if n != 0 {
				t.Errorf("drain %d reports %d calls left", i+1, n)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("drain %d still waiting 5 s after the last call ended (DrainTimeout 20 s)", i+1)
		}
	}
}
