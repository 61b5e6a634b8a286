package executor_test

import (
	"fmt"
	"testing"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Load rewrites a metered module's data segments (handler.go dataSegments:
// merged and passive behind an init export for a reactor, merged for a
// command). Guests whose answers are built from their data segments still
// answer correctly, on fresh, recycled and reused instances. Without the
// init call counter's output prefix (a data segment) would be zeros, not
// JSON; a Go guest would not get past its runtime's start-up.
func TestDataSegmentsRewrittenGuestsAnswer(t *testing.T) {
	e := newExecutor(t)
	for _, posture := range []string{"context-isolated", "none"} {
		t.Run(posture, func(t *testing.T) {
			setPosture := func(m map[string]any) { m["sandbox"] = posture }
			counter := load(t, e, "counter", setPosture)
			for i := 1; i <= 3; i++ {
				res, err := invoke(t, counter, `{}`)
				if err != nil {
					t.Fatalf("counter call %d: %v", i, err)
				}
				want := 1 // a fresh or recycled instance
				if posture == "none" {
					want = i // one warm instance, reused
				}
				jsonEqual(t, res.Output, fmt.Sprintf(`{"count":%d}`, want))
			}
			// A WASI command: two data segments 8 bytes apart, merged.
			_, err := invoke(t, load(t, e, "exit_error_command", setPosture), `{}`)
			te := wantCode(t, err, toolerr.HandlerError)
			if te.Message != "fatal: bad thing" || te.Details["exitCode"] != uint32(3) {
				t.Fatalf("exit_error_command: error = %q %v", te.Message, te.Details)
			}
			for _, fx := range []string{"go_echo_reactor", "go_echo_command"} {
				tool := load(t, e, fx, setPosture)
				for i := 0; i < 3; i++ {
					in := fmt.Sprintf(`{"message":"héllo","n":[%d,2.5e3,null]}`, i)
					res, err := invoke(t, tool, in)
					if err != nil {
						t.Fatalf("%s call %d: %v", fx, i, err)
					}
					jsonEqual(t, res.Output, in)
				}
			}
		})
	}
}
