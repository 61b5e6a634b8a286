package toolerr_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Callers branch on the code with errors.Is and read a limit's figures with
// errors.As; any error converts to an *Error with As.
func Example() {
	err := fmt.Errorf("calling acme.spin: %w", toolerr.Limits(
		&toolerr.LimitsError{Limit: toolerr.LimitCPUMs, Declared: 300, Observed: 301}, "the guest spent its CPU budget"))

	fmt.Println(errors.Is(err, toolerr.LimitsExceeded), errors.Is(err, toolerr.HandlerTrap))
	var l *toolerr.LimitsError
	if errors.As(err, &l) {
		fmt.Println(l.Limit, l.Declared, l.Observed)
	}
	fmt.Println(toolerr.As(err).Code)

	// Context errors have codes of their own and still match the context's.
	ctxErr := toolerr.As(context.DeadlineExceeded)
	fmt.Println(ctxErr.Code, errors.Is(ctxErr, context.DeadlineExceeded))
	fmt.Println(toolerr.As(errors.New("disk on fire")).Code)
	// Output:
	// true false
	// cpuMs 300 301
	// limits-exceeded
	// deadline-exceeded true
	// internal-error
}
