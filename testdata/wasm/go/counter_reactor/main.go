// counter_reactor is a Go SDK reactor with a package-level counter: each call
// increments it and outputs {"count":N}: 1 on a fresh instance, 2, 3, … when
// an instance is reused (posture none).
package main

import (
	"encoding/json"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

type Output struct {
	Count int `json:"count"`
}

var count int

func next(*sdk.Context, json.RawMessage) (Output, error) {
	count++
	return Output{Count: count}, nil
}

func init() { sdk.Handle(next) }

func main() { sdk.Main() }
