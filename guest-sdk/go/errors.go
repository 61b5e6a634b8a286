package sdk

import (
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/abi"
)

// ErrNoHandler is returned by Invoke, and reported by handle and Main, when
// no handler was registered with Handle.
var ErrNoHandler = errors.New("sdk: no handler registered (call sdk.Handle from an init function)")

// CodeHandlerError is the code reported for a handler error that is not an
// *Error, and for an *Error without a Code.
const CodeHandlerError = "handler-error"

// Error is a handler-declared failure. A handler returns one (or an error
// wrapping one) to choose the code, message and details sandboxd reports.
// Details must be encodable as JSON.
type Error struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Error returns "code: message", or just the message when Code is empty.
func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// HostError is a failed sandboxd_v1 host function: Errno is the negative ABI
// error number (see abi.Errno) and Message what last_error_read returned
// about it.
//
// errors.Is(err, abi.ErrNotFound) reports whether err is a HostError with
// that number.
type HostError struct {
	Errno   int32
	Message string
}

// Error returns the error number's name and the host's message.
func (e *HostError) Error() string {
	s := fmt.Sprintf("sandboxd_v1: %s (%d)", abi.Errno(e.Errno).String(), e.Errno)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is reports whether target is the abi.Errno of e.
func (e *HostError) Is(target error) bool {
	t, ok := target.(abi.Errno)
	return ok && int32(t) == e.Errno
}
