// Command checks_reactor is the guardrail-check fixture of package pack's
// tests: one module whose config's "mode" selects a behaviour, so one
// index can name it under several guardrails. Built with
//
//	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -buildmode=c-shared \
//	  -trimpath -buildvcs=false -ldflags='-s -w' -o ../checks_reactor.wasm .
//
// (TestCheckFixtureReproducible rebuilds it and compares.)
package main

import (
	"errors"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

type config struct {
	MinLength int    `json:"minLength"`
	Mode      string `json:"mode"`
}

func check(_ *sdk.Context, cfg config, tr sdk.Trace) (sdk.CheckResult, error) {
	switch cfg.Mode {
	case "throw":
		return sdk.CheckResult{}, errors.New("the check gave up")
	case "spin":
		for n := 0; ; n++ {
			if n < 0 {
				break
			}
		}
	}
	n := len([]rune(tr.OutputText()))
	if n < cfg.MinLength {
		return sdk.CheckResult{Passed: false, Reason: "output shorter than minLength", Attributes: map[string]any{"length": n}}, nil
	}
	return sdk.CheckResult{Passed: true, Reason: "long enough"}, nil
}

func init() { sdk.HandleCheck(check) }

func main() {}
