// go_echo_reactor is a Go SDK handler built as a reactor
// (-buildmode=c-shared): its output is its input.
package main

import (
	"encoding/json"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

func echo(_ *sdk.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }

func init() { sdk.Handle(echo) }

func main() { sdk.Main() }
