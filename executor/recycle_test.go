package executor_test

import (
	"fmt"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

const freshState = `{"g":1,"m":1,"pages":1,"fd1":1}`

// A context-isolated tool recycles its instances, and every call still sees
// a fresh instance: globals, memory (a counter and a data segment the call
// rewrites), memory size and WASI state are those of a new instantiation,
// after clean calls, handler errors, traps, memory growth and fd_close alike.
func TestRecycledInstancesAreFresh(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(1) })
	tool := load(t, e, "state_reactor", nil)
	calls := []struct{ input, want string }{
		{`{}`, freshState},
		{`{}`, freshState},
		{`{"a":1}`, ""}, // traps after changing its state
		{`{}`, freshState},
		{`{"aa":1}`, `{"g":1,"m":1,"pages":2,"fd1":1}`}, // grows memory
		{`{}`, freshState},
		{`{"aaa":1}`, freshState}, // closes fd 1 after answering
		{`{}`, freshState},
	}
	for round := 0; round < 5; round++ {
		for i, c := range calls {
			res, err := invoke(t, tool, c.input)
			if c.want == "" {
				wantCode(t, err, toolerr.HandlerTrap)
				continue
			}
			if err != nil {
				t.Fatalf("round %d call %d (%s): %v", round, i, c.input, err)
			}
			if string(res.Output) != c.want {
				t.Fatalf("round %d call %d (%s): output %s, want %s", round, i, c.input, res.Output, c.want)
			}
		}
	}
	if n := tool.Stats().RecycledCalls; n < 10 {
		t.Fatalf("only %d of %d calls were served by a recycled instance", n, 5*len(calls))
	}
}

// A standard-Go guest recycles too, and its package state never carries over.
func TestRecycledGoGuest(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(1) })
	tool := load(t, e, "counter_reactor", nil)
	for i := 0; i < 6; i++ {
		res, err := invoke(t, tool, `{}`)
		if err != nil || string(res.Output) != `{"count":1}` {
			t.Fatalf("call %d: %s, %v", i, res.Output, err)
		}
	}
	if tool.Stats().RecycledCalls == 0 {
		t.Fatal("the Go guest was never recycled")
	}
}

// Strict tools, WithRecycling(false) and deterministic executors never
// recycle: every call gets a never-used instance.
func TestNoRecycling(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  func(executor.Config) executor.Config
		edit func(map[string]any)
	}{
		"strict":        {func(c executor.Config) executor.Config { return c }, posture("strict")},
		"off":           {func(c executor.Config) executor.Config { return c.WithRecycling(false) }, nil},
		"deterministic": {func(c executor.Config) executor.Config { return c.WithDeterministic(1) }, nil},
	} {
		t.Run(name, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config { return tc.cfg(c.WithPoolSize(1)) })
			tool := load(t, e, "state_reactor", tc.edit)
			for i := 0; i < 10; i++ {
				res, err := invoke(t, tool, `{}`)
				if err != nil || string(res.Output) != freshState {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if n := tool.Stats().RecycledCalls; n != 0 {
				t.Fatalf("%d calls were served by a recycled instance", n)
			}
		})
	}
}

// Concurrent calls on a recycling tool never share an instance.
func TestRecyclingConcurrent(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(4) })
	tool := load(t, e, "state_reactor", nil)
	var failed [8]bool // goroutine g's, so that it stops at its first failure
	sandboxtest.Hammer(t, 8, 50, func(g, _ int) {
		if failed[g] {
			return
		}
		res, err := invoke(t, tool, `{}`)
		if err == nil && string(res.Output) != freshState {
			err = fmt.Errorf("output %s", res.Output)
		}
		if err != nil {
			t.Error(err)
			failed[g] = true
		}
	})
}
