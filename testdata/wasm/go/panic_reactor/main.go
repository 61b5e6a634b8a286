// panic_reactor is a Go SDK reactor whose handler panics with "boom". The Go
// runtime prints "panic: boom" and a goroutine trace to stderr and exits 2.
package main

import (
	"encoding/json"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

func explode(*sdk.Context, json.RawMessage) (json.RawMessage, error) { panic("boom") }

func init() { sdk.Handle(explode) }

func main() { sdk.Main() }
