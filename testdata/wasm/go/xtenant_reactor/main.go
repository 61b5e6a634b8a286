// xtenant_reactor is a Go SDK reactor that tries to carry what one call gave
// it into later calls, through every channel a Go guest has: package state
// (a slice of everything it saw: the input's "s", the config value CFG, the
// secret KEY), the process environment (os.Setenv), and reports what it sees
// of the host's per-call values (os.Getenv("TOKEN"), the WASI environment).
// Output: {"calls":N,"token":…,"leak":…,"environ":[…],"prev":[…]} where
// calls and prev are what earlier calls on this instance left: a fresh
// instance answers calls 0, leak "" and prev [].
package main

import (
	"fmt"
	"os"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

type output struct {
	Calls   int      `json:"calls"`
	Token   string   `json:"token"`
	Leak    string   `json:"leak"`
	Environ []string `json:"environ"`
	Prev    []string `json:"prev"`
}

var (
	calls int
	prev  = []string{}
)

func handle(c *sdk.Context, in map[string]any) (output, error) {
	o := output{Calls: calls, Token: os.Getenv("TOKEN"), Leak: os.Getenv("LEAK"), Environ: os.Environ(), Prev: append([]string{}, prev...)}
	calls++
	if s, ok := in["s"].(string); ok {
		prev = append(prev, s)
		os.Setenv("LEAK", s)
	}
	var cfg any
	if err := c.Config("CFG", &cfg); err == nil && cfg != nil {
		prev = append(prev, fmt.Sprint(cfg))
	}
	if s, err := c.Secret("KEY"); err == nil {
		prev = append(prev, s)
	}
	return o, nil
}

func init() { sdk.Handle(handle) }

func main() {}
