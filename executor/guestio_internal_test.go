package executor

import (
	"bytes"
	"strings"
	"testing"
)

// A reset forwarder serves its next call as a new one would: the last
// call's pending partial line is not forwarded with the next's output, its
// tail is not in the next call's Tail, and the forwarding cap counts from
// 0 again (instance.callStreams resets the instance's forwarders for
// every call instead of allocating two).
func TestStreamForwarderResetIsolatesCalls(t *testing.T) {
	var first, second bytes.Buffer
	f := newLineForwarder(&first, "tool", "stderr")
	_, _ = f.Write([]byte("call one: whole line\ncall one: partial"))
	_, _ = f.Write(bytes.Repeat([]byte("x"), 2*maxForwardBytes)) // over the cap: the rest dropped
	// The call ends without its Flush reaching the partial line (a
	// failed call's instance may be reused only after run's Flush; reset
	// must not depend on it).
	f.reset(&second, "tool", "stderr")
	if tail := f.Tail(); tail != "" {
		t.Errorf("Tail after reset: %q, want empty", tail)
	}
	_, _ = f.Write([]byte("call two\n"))
	f.Flush()
	if got := second.String(); got != "[tool stderr] call two\n" {
		// Also what a cap still counting the last call's bytes gives
		// (nothing forwarded, a drop note).
		t.Errorf("the next call forwarded %q, want only its own line", got)
	}
	if strings.Contains(first.String(), "call two") {
		t.Errorf("the next call's output reached the last call's sink: %q", first.String())
	}
	if tail := f.Tail(); tail != "call two\n" && tail != "call two" {
		t.Errorf("Tail: %q, want the next call's own", tail)
	}
	// Reset for another stream: the prefix is the new stream's.
	second.Reset()
	f.reset(&second, "tool", "stdout")
	_, _ = f.Write([]byte("fresh\n"))
	if got := second.String(); got != "[tool stdout] fresh\n" {
		t.Errorf("after a reset for another stream: %q", got)
	}
}
