package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// TestServeStopWithGuestRunning ends Serve (drain bound 100 ms) while a
// hostile guest (a memory.fill loop, 600 s of cpuMs, a 60 s deadline) runs,
// then closes the server and the executor as `sandboxd serve` and every
// test's cleanup do. Serve returns at the drain bound with the guest still
// stopping; closing the executor must not free the guest's memory under it.
func TestServeStopWithGuestRunning(t *testing.T) {
	rounds := 4
	if testing.Short() {
		rounds = 1
	}
	for i := range rounds {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := tool(t, "h.fill", "live_fill", 64, 600_000, nil)
			ts := start(t, server.StaticSource{Tools: []server.StaticTool{h}}, server.Options{DrainTimeout: 100 * time.Millisecond})
			got := make(chan error, 1)
			go func() {
				_, err := do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke",
					strings.NewReader(invokeBody("h.fill", `{}`)), authJSON("kindgi-timeout-ms", "60000"))
				got <- err
			}()
			eventually(t, "the call running", func() bool { return ts.metric(t, "sandboxd_inflight_calls") == "1" })
			time.Sleep(time.Duration(20*i) * time.Millisecond)
			ts.cancel()
			select {
			case err := <-ts.done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not return 30 s after its context ended")
			}
			ts.done <- nil // for the cleanup, which closes the server, then the executor
			<-got
		})
	}
}
