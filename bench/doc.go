// Package bench owns sandboxd's side-by-side benchmark suite: sandboxd's
// embedded API against the Extism go-sdk and native Go, written to
// BENCHMARKS.md by `make bench`. It is its own Go module so that Extism never
// becomes a dependency of sandboxd.
package bench
