package server_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/server"
)

// Golden texts of the serve path's call messages (see also executor's
// TestMessage* tests).
func TestMessagesServe(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	for _, tc := range []struct {
		name, body, code, want string
		headers                []string
	}{
		{"deadline from kindgi-timeout-ms", invokeBody("t.loop", `{}`), "deadline-exceeded",
			"the call ran past its 200ms deadline (kindgi-timeout-ms: 200)", []string{"kindgi-timeout-ms", "200"}},
		{"nearest tool id", invokeBody("acme.ecko", `{}`), "tool-not-in-pack",
			`tool "acme.ecko" is not in pack ` + "sandboxd" + ` (did you mean "acme.echo"?)`, nil},
		{"no near tool id", invokeBody("zzzzzzzz", `{}`), "tool-not-in-pack",
			`tool "zzzzzzzz" is not in pack ` + "sandboxd", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := wantError(t, ts.invoke(t, tc.body, tc.headers...), tc.code)
			if m["message"] != tc.want {
				t.Fatalf("message\n got %q\nwant %q", m["message"], tc.want)
			}
		})
	}
}
