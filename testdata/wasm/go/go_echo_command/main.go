// go_echo_command is a Go SDK handler built as a command (go build): its
// output is its input. The module exports both _start and the SDK's handle;
// sandboxd must treat it as a command.
package main

import (
	"encoding/json"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

func echo(_ *sdk.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }

func init() { sdk.Handle(echo) }

func main() { sdk.Main() }
