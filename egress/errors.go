package egress

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/abi"
)

// Error is an egress failure. Errno is the ABI error number the host import
// returns for it; Msg is safe to show to the guest and to log (it never
// contains a secret value).
type Error struct {
	Errno abi.Errno
	Msg   string
	Err   error // the underlying cause, if any
}

func (e *Error) Error() string { return "egress: " + e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes a timeout match context.DeadlineExceeded.
func (e *Error) Is(target error) bool {
	return e.Errno == abi.ErrTimeout && target == context.DeadlineExceeded
}

func newErr(errno abi.Errno, format string, args ...any) *Error {
	return &Error{Errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// ErrnoOf returns the ABI error number for err: the Errno of an *Error in
// its chain, ErrTimeout for a deadline, ErrUnavailable otherwise.
func ErrnoOf(err error) abi.Errno {
	var e *Error
	if errors.As(err, &e) {
		return e.Errno
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return abi.ErrTimeout
	}
	return abi.ErrUnavailable
}
