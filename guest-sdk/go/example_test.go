package sdk_test

import (
	"errors"
	"fmt"
	"strings"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

type GreetIn struct {
	Name string `json:"name"`
}

type GreetOut struct {
	Greeting string `json:"greeting"`
}

func greet(ctx *sdk.Context, in GreetIn) (GreetOut, error) {
	if in.Name == "" {
		return GreetOut{}, &sdk.Error{Code: "invalid-name", Message: "name is empty"}
	}
	greeting, ok := ctx.Env("GREETING")
	if !ok {
		greeting = "Hello"
	}
	return GreetOut{Greeting: greeting + ", " + strings.ToUpper(in.Name) + " from " + ctx.TenantID()}, nil
}

// A handler registers itself from init; a unit test runs it with Invoke,
// natively, without Wasm.
func Example() {
	sdk.Handle(greet) // in a handler: func init() { sdk.Handle(greet) }

	out, err := sdk.Invoke([]byte(`{"name":"ada"}`), []byte(`{"tenantId":"acme","runId":"r1","env":{"GREETING":"Hi"}}`))
	fmt.Println(string(out), err)

	_, err = sdk.Invoke([]byte(`{"name":""}`), nil)
	var e *sdk.Error
	fmt.Println(errors.As(err, &e), e.Code)
	// Output:
	// {"greeting":"Hi, ADA from acme"} <nil>
	// true invalid-name
}
