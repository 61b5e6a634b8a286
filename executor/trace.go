package executor

import "github.com/sandboxd/sandboxd/egress"

// Stage is a step of one call that a Tracer is told about.
type Stage uint8

// The stages, in the order a call goes through them.
const (
	// StageInputValidation validates the input against the input schema.
	StageInputValidation Stage = iota
	// StageAcquire takes or makes the instance the call runs on; its
	// detail is the Acquisition.
	StageAcquire
	// StageGuest runs the guest (or a declarative HTTP tool's request).
	StageGuest
	// StageOutputValidation validates the output against the output schema.
	StageOutputValidation
)

func (s Stage) String() string {
	switch s {
	case StageInputValidation:
		return "input-validation"
	case StageAcquire:
		return "instance-acquisition"
	case StageGuest:
		return "guest-run"
	case StageOutputValidation:
		return "output-validation"
	}
	return "stage"
}

// Acquisition is how a call got the instance it ran on (Result.Acquired).
type Acquisition string

// The acquisition paths.
const (
	// AcquiredPooled: a pre-warmed instance of the pool, never used.
	AcquiredPooled Acquisition = "pooled"
	// AcquiredRecycled: a pooled instance reset after an earlier call
	// (context-isolated tools whose module can be reset).
	AcquiredRecycled Acquisition = "recycled"
	// AcquiredWarm: an idle instance of posture none, kept from an
	// earlier call with the same needs.
	AcquiredWarm Acquisition = "warm"
	// AcquiredImage: made on the call's path from the tool's instance
	// image (no _initialize ran).
	AcquiredImage Acquisition = "image"
	// AcquiredInstantiated: made on the call's path in full
	// (instantiation and _initialize; every call of a command module).
	AcquiredInstantiated Acquisition = "instantiated"
)

// Tracer observes the stages and egress requests of one call (set per call
// with Request.Tracer; nil costs nothing). It is a narrow hook so that the
// executor needs no tracing library: the server turns it into spans.
//
// StageStart and StageEnd are called in pairs, in order, on the goroutine
// that runs the call; Egress is called from the guest's host calls on that
// goroutine too. Implementations must be fast and must not block.
type Tracer interface {
	// StageStart is called when stage s begins.
	StageStart(s Stage)
	// StageEnd is called when stage s ends: detail is the Acquisition for
	// StageAcquire ("" otherwise); err is the stage's failure or nil.
	StageEnd(s Stage, detail string, err error)
	// Egress is called before each HTTP request hop a call makes (a guest's
	// http_request, a declarative HTTP tool's request, each redirect hop)
	// once the policy admitted it. It returns the traceparent value the hop
	// carries ("" for none) and a function called once with the hop's
	// status (0 when it failed) and error when its answer's headers are in.
	Egress(method string, dest egress.Origin) (traceparent string, done func(status int, err error))
}

func (inv *invocation) stageStart(s Stage) {
	if inv.trace != nil {
		inv.trace.StageStart(s)
	}
}

func (inv *invocation) stageEnd(s Stage, detail string, err error) {
	if inv.trace != nil {
		inv.trace.StageEnd(s, detail, err)
	}
}
