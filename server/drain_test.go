package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// Regression (issue 16 item 4): --drain-timeout 0.5/1/2 s exited after
// 1.5/2.0/3.0 s and logged abandoned: 1 for a call whose client got a full
// 200. The drain bound is now exact (calls, answers and connections share
// one deadline) and abandoned counts the calls whose client got no answer.
func TestDrainBoundExact(t *testing.T) {
	slack := 400 * time.Millisecond // shared, noisy machines and -race
	drains := []time.Duration{500 * time.Millisecond, time.Second}
	if testing.Short() {
		drains = drains[:1] // each subtest spins a guest for its drain
	}
	for _, drain := range drains {
		t.Run("answered inside "+drain.String(), func(t *testing.T) {
			ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{DrainTimeout: drain})
			held := make(chan *response, 1)
			go func() {
				// Answered deadline-exceeded (a 200) at half the drain.
				r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)),
					authJSON("kindgi-timeout-ms", strconv.FormatInt(drain.Milliseconds()/2, 10)))
				held <- r
			}()
			eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
			begun := time.Now()
			ts.cancel()
			elapsed := waitServe(t, ts)
			if r := <-held; r == nil || r.status != 200 {
				t.Fatalf("held call: %v", r)
			} else {
				wantError(t, r, "deadline-exceeded")
			}
			st := ts.logs.records(t, "stopped")
			t.Logf("drain %v: a call answered at %v; Serve returned after %v; stopped %v", drain, drain/2, time.Since(begun), st)
			if elapsed > drain {
				t.Errorf("Serve returned %v after the signal, past the %v drain", elapsed, drain)
			}
			if len(st) != 1 || st[0]["abandoned"] != 0.0 {
				t.Errorf("stopped %v, want abandoned 0", st)
			}
		})
		t.Run("outliving "+drain.String(), func(t *testing.T) {
			ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{DrainTimeout: drain})
			held := make(chan *response, 1)
			go func() {
				r, _ := do(t, context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(invokeBody("t.loop", `{}`)),
					authJSON("kindgi-timeout-ms", "20000"))
				held <- r
			}()
			eventually(t, "the held call", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
			ts.cancel()
			elapsed := waitServe(t, ts)
			r := <-held
			st := ts.logs.records(t, "stopped")
			t.Logf("drain %v: a call outliving it; Serve returned after %v; client got %v; stopped %v", drain, elapsed, r, st)
			if elapsed < drain || elapsed > drain+slack {
				t.Errorf("Serve returned %v after the signal, want %v (+%v)", elapsed, drain, slack)
			}
			if r != nil {
				t.Errorf("the abandoned call's client got an answer: %d %s", r.status, r.body)
			}
			if len(st) != 1 || st[0]["abandoned"] != 1.0 {
				t.Errorf("stopped %v, want abandoned 1", st)
			}
		})
	}
}

// waitServe waits for Serve to return and reports how long it took.
func waitServe(t *testing.T, ts *testServer) time.Duration {
	t.Helper()
	begun := time.Now()
	select {
	case err := <-ts.done:
		if err != nil {
			t.Fatal(err)
		}
		ts.done <- nil // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
	}
	return time.Since(begun)
}
