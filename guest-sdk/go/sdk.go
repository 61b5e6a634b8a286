package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// handlerFunc is a registered handler over raw JSON.
type handlerFunc func(c *Context, input []byte) ([]byte, error)

// registered is the handler set by Handle; nil until then.
var registered handlerFunc

// Handle registers fn as the module's handler. Call it once, from an init
// function, so that it has run before the reactor's first handle call and
// before Main. It panics if fn is nil or a handler is already registered.
//
// The input JSON is decoded into In with encoding/json, and the Out the
// handler returns is encoded with it; use json.RawMessage for either to
// handle raw JSON.
func Handle[In, Out any](fn func(*Context, In) (Out, error)) {
	if fn == nil {
		panic("sdk: Handle called with a nil function")
	}
	if registered != nil {
		panic("sdk: Handle called twice")
	}
	registered = func(c *Context, input []byte) ([]byte, error) {
		var in In
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("sdk: decoding input: %w", err)
		}
		out, err := fn(c, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("sdk: encoding output: %w", err)
		}
		return b, nil
	}
}

// Invoke runs the registered handler in process on input, with ctx as the
// call context, and returns the output JSON or the handler's error. It is
// meant for unit tests of handler logic on any platform.
//
// ctx has the shape sandboxd passes to context_read ({"tenantId", "runId",
// "env", ...}; nil means {}). Because there is no host, Invoke also reads
// declared values from the Kindgi ctx fields sandboxd would resolve them
// from: Context.Secret from ctx.secrets (an object of strings) and
// Context.Config from ctx.config (an object of JSON values); those two fields
// are removed from what Context.Raw returns, as sandboxd never passes them to
// a guest. Log lines go to os.Stderr.
func Invoke(input []byte, ctx json.RawMessage) (output []byte, err error) {
	return call(newMemHost(ctx, os.Stderr), input)
}

// Main runs the registered handler as a command: it reads all of stdin as the
// input, writes the output JSON to stdout and exits 0; on failure it writes
// the error message to stderr and exits 1. Call it from main; in a reactor
// build (-buildmode=c-shared) main is never run.
func Main() {
	os.Exit(runMain(commandHost(), os.Stdin, os.Stdout, os.Stderr))
}

func runMain(h host, stdin io.Reader, stdout, stderr io.Writer) int {
	in, err := io.ReadAll(stdin)
	if err != nil {
		err = fmt.Errorf("sdk: reading stdin: %w", err)
	}
	var out []byte
	if err == nil {
		out, err = call(h, in)
	}
	if err == nil {
		_, err = stdout.Write(append(out, '\n'))
	}
	if err != nil {
		// Inside sandboxd the code and details survive through error_set;
		// stderr carries the message for any other WASI runtime.
		if es, ok := h.(errorSetter); ok {
			reportError(es, err)
		}
		fmt.Fprintln(stderr, err.Error())
		return 1
	}
	return 0
}

// call runs the registered handler with a fresh Context over h.
func call(h host, input []byte) ([]byte, error) {
	fn := registered
	if fn == nil {
		return nil, ErrNoHandler
	}
	return fn(&Context{h: h}, input)
}

// handleWith is the body of the reactor's exported handle: it returns 0 after
// a successful output_set, or 1 after reporting the failure with error_set.
func handleWith(h reactorHost) int32 {
	in, err := h.input()
	if err != nil {
		err = fmt.Errorf("sdk: reading input: %w", err)
	} else {
		var out []byte
		out, err = call(h, in)
		if err == nil {
			if err = h.setOutput(out); err == nil {
				return 0
			}
			err = fmt.Errorf("sdk: setting output: %w", err)
		}
	}
	reportError(h, err)
	return 1
}

// maxFallbackMessage bounds the message of the second error_set attempt made
// when the first one is refused (the ABI caps error_set at 64 KiB).
const maxFallbackMessage = 4 << 10

// reportError passes err to error_set; if the host refuses it (too large, or
// details that do not encode), it retries once with a truncated message and no
// details. The handler fails either way, so a second refusal is ignored.
func reportError(h errorSetter, err error) {
	e := declared(err)
	if b, merr := json.Marshal(e); merr == nil && h.setError(b) == nil {
		return
	}
	short := &Error{Code: e.Code, Message: truncateUTF8(e.Message, maxFallbackMessage)}
	b, _ := json.Marshal(short)
	_ = h.setError(b)
}

// errorSetter is a host that takes error_set.
type errorSetter interface{ setError(b []byte) error }

// declared returns the *Error behind err, or a handler-error wrapping its text.
func declared(err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		return &Error{Code: CodeHandlerError, Message: err.Error()}
	}
	if e.Code == "" {
		c := *e
		c.Code = CodeHandlerError
		return &c
	}
	return e
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
