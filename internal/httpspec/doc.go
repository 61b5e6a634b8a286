// Package httpspec owns a declarative HTTP tool's spec (spec.kind "http",
// Kindgi's HttpToolSpec): Compile checks it at load against the tool's
// manifest and network policy, and a *Spec fills its URL, header and body
// templates from a call's input by Kindgi's rules. It performs no request:
// the executor sends what a Spec builds through egress.
//
// A value the input cannot place is one of the error types FillError,
// SegmentError and HeaderValueError, for the caller to turn into its own
// error contract.
package httpspec
