package egress

import (
	"context"
	"errors"
	"fmt"
)

// Reason says why an egress request failed. Each guest ABI maps reasons to
// what its guests see (ABI v1: an error number; Extism: a failed call); the
// names are stable and appear in error details and the audit trail.
type Reason string

// The reasons an egress request fails.
const (
	ReasonDenied        Reason = "denied"                     // refused by policy (network none, host not allowlisted, bound secret)
	ReasonNotFound      Reason = "not-found"                  // a secret placeholder names no declared secret with a value
	ReasonInvalid       Reason = "invalid-argument"           // malformed request (method, URL, headers)
	ReasonBadHandle     Reason = "bad-handle"                 // a closed response was read
	ReasonUnavailable   Reason = "unavailable"                // network failure: DNS, connect, TLS, reset
	ReasonTimeout       Reason = "timeout"                    // per-request timeout or invocation deadline hit
	ReasonRequestBudget Reason = "request-budget-exceeded"    // request count per invocation exhausted
	ReasonBodyBudget    Reason = "body-budget-exceeded"       // request/response body bytes budget exhausted
	ReasonHeaderBudget  Reason = "header-budget-exceeded"     // header bytes budget exhausted
	ReasonConnBudget    Reason = "connection-budget-exceeded" // concurrent responses budget exhausted
	ReasonRedirect      Reason = "redirect-refused"           // too many redirects or a refused redirect
	ReasonMemoryBudget  Reason = "memory-budget-exceeded"     // host-side buffers would exceed the memory budget
	ReasonInternal      Reason = "internal"                   // host failure not caused by the guest
)

// Reasons lists every reason.
func Reasons() []Reason {
	return []Reason{ReasonDenied, ReasonNotFound, ReasonInvalid, ReasonBadHandle, ReasonUnavailable, ReasonTimeout,
		ReasonRequestBudget, ReasonBodyBudget, ReasonHeaderBudget, ReasonConnBudget, ReasonRedirect, ReasonMemoryBudget, ReasonInternal}
}

// Error is an egress failure. Reason says why; Msg is safe to show to the
// guest and to log (it never contains a secret value).
type Error struct {
	Reason Reason
	Msg    string
	Err    error // the underlying cause, if any
}

func (e *Error) Error() string { return "egress: " + e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes a timeout match context.DeadlineExceeded.
func (e *Error) Is(target error) bool {
	return e.Reason == ReasonTimeout && target == context.DeadlineExceeded
}

func newErr(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the reason for err: the Reason of an *Error in its chain,
// ReasonTimeout for a deadline or cancellation, ReasonUnavailable otherwise.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return ReasonTimeout
	}
	return ReasonUnavailable
}

// MessageOf returns the guest-safe message of err: an *Error's Msg, else
// err's text.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}
