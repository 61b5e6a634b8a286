// Package abi defines sandboxd's host↔guest ABI v1: the import module name,
// every host function with its Wasm signature, the error numbers host
// functions return, and the entry points a handler exports.
//
// The normative text, with the size/copy convention, lives in README.md beside
// this file. ABI v1 may gain functions; it never changes or removes one.
package abi

import "fmt"

// ModuleName is the import module every host function lives in.
const ModuleName = "sandboxd_v1"

// WASIModuleName is the only other import module a handler may use.
const WASIModuleName = "wasi_snapshot_preview1"

// Entry points a handler exports.
const (
	ExportHandle     = "handle"      // reactor: () -> i32, 0 = success
	ExportInitialize = "_initialize" // reactor: optional, run once per instance
	ExportStart      = "_start"      // command (plain WASI): stdin → stdout, exit code
	ExportMemory     = "memory"      // reactor: required
)

// Host function names.
const (
	FnInputRead     = "input_read"
	FnContextRead   = "context_read"
	FnOutputSet     = "output_set"
	FnErrorSet      = "error_set"
	FnLog           = "log"
	FnHTTPRequest   = "http_request"
	FnHTTPStatus    = "http_status"
	FnHTTPHeaders   = "http_headers_read"
	FnHTTPBodyRead  = "http_body_read"
	FnHTTPClose     = "http_close"
	FnSecretGet     = "secret_get"
	FnConfigGet     = "config_get"
	FnLastErrorRead = "last_error_read"
)

// ValType is a Wasm value type of a host function signature.
type ValType byte

// The value types ABI v1 uses (their Wasm binary encodings).
const (
	I32 ValType = 0x7f
	I64 ValType = 0x7e
)

func (v ValType) String() string {
	switch v {
	case I32:
		return "i32"
	case I64:
		return "i64"
	}
	return fmt.Sprintf("valtype(0x%x)", byte(v))
}

// Signature is a host function's parameter and result types.
type Signature struct {
	Params  []ValType
	Results []ValType
}

func (s Signature) String() string {
	return fmt.Sprintf("%v -> %v", s.Params, s.Results)
}

// Equal reports whether two signatures are identical.
func (s Signature) Equal(o Signature) bool {
	if len(s.Params) != len(o.Params) || len(s.Results) != len(o.Results) {
		return false
	}
	for i := range s.Params {
		if s.Params[i] != o.Params[i] {
			return false
		}
	}
	for i := range s.Results {
		if s.Results[i] != o.Results[i] {
			return false
		}
	}
	return true
}

func sig(results []ValType, params ...ValType) Signature {
	return Signature{Params: params, Results: results}
}

var (
	retI32 = []ValType{I32}
	retI64 = []ValType{I64}
)

// Functions maps every ABI v1 host function to its signature.
var Functions = map[string]Signature{
	FnInputRead:     sig(retI32, I32, I32),
	FnContextRead:   sig(retI32, I32, I32),
	FnOutputSet:     sig(retI32, I32, I32),
	FnErrorSet:      sig(retI32, I32, I32),
	FnLog:           sig(nil, I32, I32, I32),
	FnHTTPRequest:   sig(retI64, I32, I32, I32, I32),
	FnHTTPStatus:    sig(retI32, I32),
	FnHTTPHeaders:   sig(retI32, I32, I32, I32),
	FnHTTPBodyRead:  sig(retI32, I32, I32, I32),
	FnHTTPClose:     sig(retI32, I32),
	FnSecretGet:     sig(retI32, I32, I32, I32, I32),
	FnConfigGet:     sig(retI32, I32, I32, I32, I32),
	FnLastErrorRead: sig(retI32, I32, I32),
}

// Log levels for FnLog.
const (
	LogDebug int32 = 0
	LogInfo  int32 = 1
	LogWarn  int32 = 2
	LogError int32 = 3
)

// Errno is a negative error number returned by a host function. After any
// negative result, last_error_read returns a message describing it.
type Errno int32

// ABI v1 error numbers. Values are fixed forever; new ones may be added.
const (
	ErrDenied        Errno = -1  // refused by policy (network none, host not allowlisted, secret under strict)
	ErrNotFound      Errno = -2  // name not declared or no value provided
	ErrInvalid       Errno = -3  // malformed argument (bad JSON, bad method/URL, bad level)
	ErrOutOfBounds   Errno = -4  // ptr/len range outside guest memory
	ErrTooLarge      Errno = -5  // value over its cap (output, error, log line)
	ErrBadHandle     Errno = -6  // unknown or closed response handle
	ErrNoInvocation  Errno = -7  // called outside an invocation (e.g. from _initialize)
	ErrUnavailable   Errno = -8  // network failure: DNS, connect, TLS, reset
	ErrTimeout       Errno = -9  // per-request timeout or invocation deadline hit
	ErrRequestBudget Errno = -10 // request count per invocation exhausted
	ErrBodyBudget    Errno = -11 // request/response body bytes budget exhausted
	ErrHeaderBudget  Errno = -12 // header bytes budget exhausted
	ErrConnBudget    Errno = -13 // concurrent connections budget exhausted
	ErrRedirect      Errno = -14 // too many redirects or a refused redirect (https→http)
	ErrMemoryBudget  Errno = -15 // host-side buffers would exceed memMB
	ErrInternal      Errno = -16 // host failure not caused by the guest
)

var errnoNames = map[Errno]string{
	ErrDenied:        "denied",
	ErrNotFound:      "not-found",
	ErrInvalid:       "invalid-argument",
	ErrOutOfBounds:   "out-of-bounds",
	ErrTooLarge:      "too-large",
	ErrBadHandle:     "bad-handle",
	ErrNoInvocation:  "no-invocation",
	ErrUnavailable:   "unavailable",
	ErrTimeout:       "timeout",
	ErrRequestBudget: "request-budget-exceeded",
	ErrBodyBudget:    "body-budget-exceeded",
	ErrHeaderBudget:  "header-budget-exceeded",
	ErrConnBudget:    "connection-budget-exceeded",
	ErrRedirect:      "redirect-refused",
	ErrMemoryBudget:  "memory-budget-exceeded",
	ErrInternal:      "internal",
}

// Errnos lists every defined error number, most negative last.
func Errnos() []Errno {
	out := make([]Errno, 0, len(errnoNames))
	for e := Errno(-1); ; e-- {
		if _, ok := errnoNames[e]; !ok {
			return out
		}
		out = append(out, e)
	}
}

// String returns the error number's stable name ("denied", ...).
func (e Errno) String() string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno(%d)", int32(e))
}

// Error implements error.
func (e Errno) Error() string { return "sandboxd_v1: " + e.String() }
