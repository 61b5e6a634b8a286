package executor

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// TimeoutSource names what set a call's deadline, for the deadline-exceeded
// message ("the call ran past its 100ms deadline (--timeout)"). Name is a
// constant (a flag such as "--timeout", a header such as
// "kindgi-timeout-ms", an MCP _meta key); Requested, when positive, is the
// value the request gave it, printed after the name
// ("(kindgi-timeout-ms: 50)"). The zero value is the default timeout. It is
// built without allocating: the text is made only when a call fails.
type TimeoutSource struct {
	Name      string
	Requested int64
}

// DeadlineMessage is the one wording of a passed deadline, on every path
// (run, serve, MCP): the deadline's length and what set it.
func DeadlineMessage(timeout time.Duration, src TimeoutSource) string {
	s := "the call ran past its "
	if timeout > 0 {
		s += timeout.String() + " "
	}
	s += "deadline ("
	switch {
	case src.Name == "":
		s += "the default timeout"
	case src.Requested > 0:
		s += src.Name + ": " + strconv.FormatInt(src.Requested, 10)
	default:
		s += src.Name
	}
	return s + ")"
}

// deadlineError rewrites a deadline-exceeded error's message into
// DeadlineMessage's wording for req (whatever path noticed the deadline:
// the meter, the HTTP client, validation, the call context).
func (t *Tool) deadlineError(te *toolerr.Error, ctx deadliner, req *Request) *toolerr.Error {
	timeout, src := req.Timeout, req.TimeoutSource
	if timeout == 0 && src.Name == "" {
		if _, ok := ctx.Deadline(); ok {
			src.Name = "the caller's context"
		} else {
			timeout = t.exec.cfg.defaultTimeout
		}
	}
	te.Message = DeadlineMessage(timeout, src)
	return te
}

type deadliner interface{ Deadline() (time.Time, bool) }

// Limit hints: what to change when a limit stopped a call.

// raiseHint says how to give a tool more of limit: the manifest field, and
// the operator's ceiling when there is one.
func (t *toolEnv) raiseHint(limit toolerr.Limit) string {
	field, flag, ceiling, declared := "", "", int64(0), int64(0)
	switch limit {
	case toolerr.LimitCPUMs:
		field, flag, ceiling, declared = "limits.cpuMs", "--max-cpu-ms", t.cfg.maxCPUMs, t.limits.cpuMs
	case toolerr.LimitMemMB:
		field, flag, ceiling, declared = "limits.memMB", "--max-mem-mb", t.cfg.maxMemMB, t.limits.memMB
	default:
		return ""
	}
	switch {
	case ceiling == 0:
		return "; raise " + field + " in the manifest (no operator ceiling " + flag + ")"
	case declared >= ceiling:
		return fmt.Sprintf("; %s is already at the operator ceiling (%s %d): the operator must raise it, or the handler use less", field, flag, ceiling)
	default:
		return fmt.Sprintf("; raise %s in the manifest (operator ceiling %s %d)", field, flag, ceiling)
	}
}

// cpuExceeded is the limits-exceeded error of a spent cpuMs budget; what
// names what used it ("the guest", "the guest and validating its output").
func (t *toolEnv) cpuExceeded(used time.Duration, what string) error {
	return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitCPUMs, Declared: t.limits.cpuMs, Observed: used.Milliseconds()},
		fmt.Sprintf("%s used its %d ms CPU budget (limits.cpuMs)%s", what, t.limits.cpuMs, t.raiseHint(toolerr.LimitCPUMs)))
}

// mb prints a byte count in MB (MiB, as memMB counts), one decimal.
func mb(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
}
