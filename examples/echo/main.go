// Command echo is the example sandboxd handler (tool acme.echo): it returns
// its input message repeated. Build it as a reactor with
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o handler.wasm .
//
// (make wasm does, from the repository root).
package main

import (
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

// Input is the tool input; see "input" in tool.json.
type Input struct {
	Message string `json:"message"`
	Repeat  int    `json:"repeat"` // sandboxd fills the schema default 1; 0 (absent) means 1 too
}

// Output is the tool output; see "output" in tool.json.
type Output struct {
	Echo   string `json:"echo"`
	Length int    `json:"length"` // characters (Unicode code points) in Echo
}

func echo(ctx *sdk.Context, in Input) (Output, error) {
	n := in.Repeat
	if n == 0 {
		n = 1
	}
	if n < 0 {
		return Output{}, &sdk.Error{Code: "invalid-repeat", Message: "repeat must be at least 1",
			Details: map[string]any{"repeat": in.Repeat}}
	}
	s := strings.Repeat(in.Message, n)
	ctx.Debug("echoing the message " + strconv.Itoa(n) + " time(s)")
	return Output{Echo: s, Length: utf8.RuneCountInString(s)}, nil
}

func init() { sdk.Handle(echo) }

func main() { sdk.Main() }
