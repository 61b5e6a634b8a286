// Package sdk is the Go guest SDK for sandboxd: it turns a plain Go function
// over typed structs into a Wasm handler that speaks sandboxd's handler ABI v1
// (import module "sandboxd_v1"; the normative text is abi/README.md in this
// repository).
//
// A handler author writes:
//
//	package main
//
//	import sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
//
//	type In struct{ Message string `json:"message"` }
//	type Out struct{ Echo string `json:"echo"` }
//
//	func echo(ctx *sdk.Context, in In) (Out, error) { return Out{Echo: in.Message}, nil }
//
//	func init() { sdk.Handle(echo) } // registers the handler
//	func main() { sdk.Main() }       // used only by the command build
//
// # Build commands
//
// Reactor (preferred: sandboxd calls the exported handle once per invocation
// and can pre-warm instances):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o handler.wasm .
//
// Command (plain WASI: input on stdin, output on stdout, exit code):
//
//	GOOS=wasip1 GOARCH=wasm go build -o handler.wasm .
//
// Add -trimpath -buildvcs=false for reproducible output. -ldflags='-s -w'
// drops the Wasm name section (about 2% of a module), at the cost of function
// names in the host's trap stack traces; Go's own panic traces keep them.
//
// # Contract
//
// The reactor build exports _initialize, which starts the Go runtime and runs
// every package's init functions (so Handle must be called from init), and
// handle, which this package implements: it reads the input with input_read,
// decodes it into In, calls the handler, encodes Out and passes it to
// output_set, returning 0. main is never run in a reactor. When the input does
// not decode, or the handler returns an error, handle calls error_set and
// returns 1. An error that is, or wraps, an *Error is reported with its Code,
// Message and Details; any other error as code "handler-error" with
// err.Error() as the message. This package does not recover panics: a
// handler that panics makes the Go runtime print the panic to stderr and, in a
// reactor, trap (sandboxd reports handler-trap).
//
// The command build exports _start, which runs init functions and then main;
// Main reads all of stdin, runs the registered handler, writes the output
// JSON and a newline to stdout and exits 0, or writes the error message to
// stderr and exits 1. The command build also exports handle, which sandboxd ignores
// because _start is present.
//
// A Context gives the handler the call context (context_read), declared
// config values (config_get) and secrets (secret_get), and a log
// (log). A failing host function yields a *HostError carrying the ABI error
// number and the message from last_error_read.
//
// # Testing without Wasm
//
// The package builds for any GOOS/GOARCH. Outside GOOS=wasip1 nothing is
// imported from sandboxd_v1, and Invoke runs the registered handler in
// process, so handler logic is unit-testable with a plain go test. Main also
// works natively (stdin to stdout) with an empty call context.
//
// # Outbound HTTP
//
// Package sdkhttp (github.com/sandboxd/sandboxd/guest-sdk/go/sdkhttp) is an
// http.RoundTripper over the ABI's http_request family, so handlers use
// net/http unchanged:
//
//	client := &http.Client{Transport: sdkhttp.Transport{}}
//
// The host applies the manifest's network policy; a refused request is an
// *HostError whose Errno says why. It is a separate package so handlers that
// make no requests do not link net/http.
//
// # Using the SDK from your own module
//
// The module github.com/sandboxd/sandboxd is not published on a module
// proxy, so point Go at a clone of the repository, either with a replace
// directive (from a handler directory beside a clone in ../sandboxd):
//
//	go mod init example.com/myhandler
//	go mod edit -replace github.com/sandboxd/sandboxd=../sandboxd
//	go mod tidy
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o handler.wasm .
//
// or with a workspace, which leaves go.mod untouched (do not run go mod tidy
// under it; it ignores go.work):
//
//	go mod init example.com/myhandler
//	go work init . ../sandboxd
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o handler.wasm .
//
// The repository's README.md ("In your own module") says the same, and this
// package's tests run both sequences outside the repository.
package sdk
