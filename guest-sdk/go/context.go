package sdk

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/abi"
)

// Level is a log level of the ABI's log function.
type Level int32

// The log levels, numbered as in ABI v1.
const (
	LevelDebug = Level(abi.LogDebug)
	LevelInfo  = Level(abi.LogInfo)
	LevelWarn  = Level(abi.LogWarn)
	LevelError = Level(abi.LogError)
)

// String returns "debug", "info", "warn" or "error".
func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarn:
		return "warn"
	case LevelError:
		return "error"
	}
	return fmt.Sprintf("level(%d)", int32(l))
}

// Context is the handler's view of one invocation: its call context, the
// declared config values and secrets, and a log. A Context is valid only
// during the handler call it was passed to. Its methods are safe for
// concurrent use by goroutines the handler starts and waits for.
type Context struct {
	h host

	once   sync.Once
	raw    json.RawMessage
	fields contextFields
}

// contextFields are the parts of the call context Context has accessors for.
type contextFields struct {
	TenantID  string                     `json:"tenantId"`
	RunID     string                     `json:"runId"`
	RequestID string                     `json:"requestId"`
	Env       map[string]json.RawMessage `json:"env"`
}

func (c *Context) load() {
	c.once.Do(func() {
		raw, err := c.h.context()
		if err != nil {
			return
		}
		c.raw = raw
		_ = json.Unmarshal(raw, &c.fields) // a malformed context leaves the fields empty
	})
}

// Raw returns the call context JSON as context_read gives it: tenantId,
// runId and, when given, requestId, projectId, orgId, idempotencyKey,
// settings and env. It is read once, on first use of any accessor, and is
// nil if the host could not provide it.
func (c *Context) Raw() json.RawMessage {
	c.load()
	return c.raw
}

// TenantID returns the calling tenant's id.
func (c *Context) TenantID() string { c.load(); return c.fields.TenantID }

// RunID returns the id of the run the call belongs to.
func (c *Context) RunID() string { c.load(); return c.fields.RunID }

// RequestID returns the request id, or "" when the caller gave none.
func (c *Context) RequestID() string { c.load(); return c.fields.RequestID }

// Env returns the value of a declared needsSpec.env variable from the
// context's env object, and whether it is present. A value that is not a JSON
// string is returned as its JSON text.
func (c *Context) Env(name string) (string, bool) {
	c.load()
	v, ok := c.fields.Env[name]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	return string(v), true
}

// Config decodes the declared needsSpec.config value name (config_get) into
// v, as json.Unmarshal does. An undeclared or missing name gives a
// *HostError matching abi.ErrNotFound.
func (c *Context) Config(name string, v any) error {
	b, err := c.h.config(name)
	if err != nil {
		return fmt.Errorf("sdk: config %q: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("sdk: config %q: %w", name, err)
	}
	return nil
}

// Secret returns the declared needsSpec.secrets value name (secret_get). An
// undeclared or missing name gives a *HostError matching abi.ErrNotFound;
// under the strict posture every call gives one matching abi.ErrDenied.
func (c *Context) Secret(name string) (string, error) {
	b, err := c.h.secret(name)
	if err != nil {
		return "", fmt.Errorf("sdk: secret %q: %w", name, err)
	}
	return string(b), nil
}

// Log writes one log line at level. sandboxd bounds lines per invocation and
// truncates long ones; logging never fails the handler.
func (c *Context) Log(level Level, msg string) { c.h.log(level, msg) }

// Debug logs msg at LevelDebug.
func (c *Context) Debug(msg string) { c.h.log(LevelDebug, msg) }

// Info logs msg at LevelInfo.
func (c *Context) Info(msg string) { c.h.log(LevelInfo, msg) }

// Warn logs msg at LevelWarn.
func (c *Context) Warn(msg string) { c.h.log(LevelWarn, msg) }

// Error logs msg at LevelError.
func (c *Context) Error(msg string) { c.h.log(LevelError, msg) }
