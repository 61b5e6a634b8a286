// Package toolerr owns sandboxd's error taxonomy: the native error codes of
// docs/DESIGN.md ("Errors"), the typed error that carries them, and Ajv-shaped
// validation issues.
//
// Every failure sandboxd reports to a caller is an *Error whose Code is one of
// the Code constants below. Callers branch with errors.Is against a Code
// (errors.Is(err, toolerr.HandlerTrap)) or errors.As into *Error or
// *LimitsError. Deadline and cancellation errors also match
// context.DeadlineExceeded and context.Canceled.
package toolerr

import (
	"context"
	"errors"
	"fmt"
)

// Code is a native sandboxd error code (kebab-case, docs/DESIGN.md "Errors").
// A Code is itself an error, so it can be used as an errors.Is target.
type Code string

// Error implements error so that a Code is a sentinel.
func (c Code) Error() string { return string(c) }

// The native codes. The list is closed: every *Error carries one of them.
const (
	InvalidToolDefinition   Code = "invalid-tool-definition"
	InputValidationFailed   Code = "input-validation-failed"
	OutputValidationFailed  Code = "output-validation-failed"
	HandlerError            Code = "handler-error"
	HandlerTrap             Code = "handler-trap"
	HandlerShapeInvalid     Code = "handler-shape-invalid"
	LimitsExceeded          Code = "limits-exceeded"
	DeadlineExceeded        Code = "deadline-exceeded"
	Cancelled               Code = "cancelled"
	LevelNotSupported       Code = "level-not-supported"
	PolicyRefused           Code = "policy-refused"
	ArtifactUnavailable     Code = "artifact-unavailable"
	ArtifactIntegrityFailed Code = "artifact-integrity-failed"
	ArtifactRefused         Code = "artifact-refused"
	ToolNotInPack           Code = "tool-not-in-pack"
	ToolVersionMismatch     Code = "tool-version-mismatch"
	MalformedMessage        Code = "malformed-message"
	UnknownProtocolVersion  Code = "unknown-protocol-version"
	UnexpectedMessageKind   Code = "unexpected-message-kind"
	Internal                Code = "internal-error"
)

// Codes lists every native code, in docs/DESIGN.md order.
var Codes = []Code{
	InvalidToolDefinition, InputValidationFailed, OutputValidationFailed,
	HandlerError, HandlerTrap, HandlerShapeInvalid, LimitsExceeded,
	DeadlineExceeded, Cancelled, LevelNotSupported, PolicyRefused,
	ArtifactUnavailable, ArtifactIntegrityFailed, ArtifactRefused,
	ToolNotInPack, ToolVersionMismatch, MalformedMessage,
	UnknownProtocolVersion, UnexpectedMessageKind, Internal,
}

// Issue is one validation problem in Ajv's shape
// ({instancePath, schemaPath, keyword, params, message}).
type Issue struct {
	InstancePath string         `json:"instancePath"`
	SchemaPath   string         `json:"schemaPath"`
	Keyword      string         `json:"keyword"`
	Params       map[string]any `json:"params"`
	Message      string         `json:"message"`
}

// Error is a failure with a native code. Message is human-readable and never
// contains secrets. Details is code-specific structured data (for
// limits-exceeded: limit, declared, observed). Err, when set, is the
// underlying cause and is reachable through errors.Unwrap.
type Error struct {
	Code    Code
	Message string
	ToolID  string
	Issues  []Issue
	Details map[string]any
	Err     error
}

// New returns an *Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code whose message is msg and whose cause is err.
// The cause's text is appended to the message.
func Wrap(code Code, err error, msg string) *Error {
	m := msg
	if err != nil {
		if m != "" {
			m += ": "
		}
		m += err.Error()
	}
	return &Error{Code: code, Message: m, Err: err}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is this error's Code, or the context error this
// code corresponds to (deadline-exceeded ~ context.DeadlineExceeded,
// cancelled ~ context.Canceled).
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Code:
		return t == e.Code
	}
	switch e.Code {
	case DeadlineExceeded:
		return target == context.DeadlineExceeded
	case Cancelled:
		return target == context.Canceled
	}
	return false
}

// WithTool returns e with ToolID set (e is modified and returned).
func (e *Error) WithTool(id string) *Error {
	if e.ToolID == "" {
		e.ToolID = id
	}
	return e
}

// Limit names a resource cap of a tool's limits.
type Limit string

// The limits that limits-exceeded reports.
const (
	LimitMemMB Limit = "memMB"
	LimitCPUMs Limit = "cpuMs"
	// LimitFuel is a deterministic instruction budget (executor
	// Config.WithFuelBudget), an addition to docs/DESIGN.md's two limits.
	LimitFuel Limit = "fuel"
)

// LimitsError is the data of a limits-exceeded failure. It is reachable from
// an *Error with errors.As.
type LimitsError struct {
	Limit    Limit
	Declared int64
	Observed int64
}

func (l *LimitsError) Error() string {
	return fmt.Sprintf("%s limit exceeded: declared %d, observed %d", l.Limit, l.Declared, l.Observed)
}

// Limits returns a limits-exceeded *Error carrying l in Details and as cause.
func Limits(l *LimitsError, msg string) *Error {
	if msg == "" {
		msg = l.Error()
	}
	return &Error{
		Code:    LimitsExceeded,
		Message: msg,
		Details: map[string]any{"limit": string(l.Limit), "declared": l.Declared, "observed": l.Observed},
		Err:     l,
	}
}

// As converts any error into an *Error: an *Error anywhere in err's chain is
// returned as is; context errors become deadline-exceeded / cancelled; any
// other error becomes internal-error.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	var c Code
	if errors.As(err, &c) {
		return &Error{Code: c, Message: string(c), Err: err}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Wrap(DeadlineExceeded, err, "wall deadline exceeded")
	case errors.Is(err, context.Canceled):
		return Wrap(Cancelled, err, "invocation cancelled")
	}
	return Wrap(Internal, err, "")
}
