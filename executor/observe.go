package executor

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
)

// Phase is a tool-call lifecycle phase (docs/DESIGN.md "Canonical tool-call
// events"): pending → in_progress → completed | failed.
type Phase string

// The lifecycle phases.
const (
	PhasePending    Phase = "pending"
	PhaseInProgress Phase = "in_progress"
	PhaseCompleted  Phase = "completed"
	PhaseFailed     Phase = "failed"
)

// CallEvent is one lifecycle step of one Invoke, given to the observer set
// with Config.WithCallObserver. Events of one call share CallID and arrive in
// order on the calling goroutine.
type CallEvent struct {
	Phase   Phase
	CallID  string
	Tool    *Tool
	Context *CallContext
	// Input is the validated input with defaults filled; nil in pending and
	// in a failed event whose input did not validate.
	Input json.RawMessage
	// Result is set in completed (and in failed when the guest ran).
	Result *Result
	// Err is set in failed.
	Err error
}

func (t *Tool) observe(ev CallEvent) {
	if fn := t.exec.cfg.observer; fn != nil {
		ev.Tool = t
		fn(ev)
	}
}

// NewCallID returns a random tool-call id.
func NewCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
