package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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

// growReactor is a reactor whose every call grows its memory by two pages
// and reports what a fresh instance would not show: the memory's size
// before it grew ("pages", the declared minimum in a fresh instance),
// whether the new pages held anything but zeros ("leak"), and a counter
// in the original memory ("m", 1). It fills the new memory with ones as
// it scans, so that a reset that only set the size back would leave them
// for the next call.
func growReactor(t *testing.T, pages int) []byte {
	t.Helper()
	const tmpl = `{"pages":0,"leak":0,"m":0}`
	at := func(key string) int { return 2048 + strings.Index(tmpl, key) + len(key) + 2 }
	return sandboxtest.WAT(t, fmt.Sprintf(`(module
  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") %[1]d)
  (data (i32.const 2048) %[2]q)
  (func (export "handle") (result i32)
    (local $before i32) (local $p i32) (local $end i32) (local $leak i32)
    (local.set $before (memory.size))
    (if (i32.lt_s (memory.grow (i32.const 2)) (i32.const 0)) (then unreachable))
    (local.set $p (i32.mul (local.get $before) (i32.const 65536)))
    (local.set $end (i32.add (local.get $p) (i32.const 131072)))
    (loop $scan
      (if (i64.ne (i64.load (local.get $p)) (i64.const 0)) (then (local.set $leak (i32.const 1))))
      (i64.store (local.get $p) (i64.const -1))
      (local.set $p (i32.add (local.get $p) (i32.const 8)))
      (br_if $scan (i32.lt_u (local.get $p) (local.get $end))))
    (i32.store (i32.const 1024) (i32.add (i32.load (i32.const 1024)) (i32.const 1)))
    (i32.store8 (i32.const %[3]d) (i32.add (i32.const 48) (local.get $before)))
    (i32.store8 (i32.const %[4]d) (i32.add (i32.const 48) (local.get $leak)))
    (i32.store8 (i32.const %[5]d) (i32.add (i32.const 48) (i32.load (i32.const 1024))))
    (call $output_set (i32.const 2048) (i32.const %[6]d))))`, pages, tmpl, at("pages"), at("leak"), at("m"), len(tmpl)))
}

// An instance whose memory grew during its call is recycled all the same,
// and the next call sees a fresh instance's memory: its declared size, and
// zeros where the previous call grew it and wrote. Both forms of the saved
// state: copied chunks (1 page) and a mapped image (8 pages, over
// imageMapMin), with the pool refilled on the refill goroutine (size 2) or
// reset by the caller (size 1).
func TestRecycledGrownMemoryIsFresh(t *testing.T) {
	for _, pages := range []int{1, 8} {
		wasm := growReactor(t, pages)
		for _, pool := range []int{1, 2} {
			t.Run(fmt.Sprintf("%d pages, pool %d", pages, pool), func(t *testing.T) {
				e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(pool) })
				m, _ := json.Marshal(map[string]any{
					"id": "test.grow", "description": "grows its memory", "version": "1.0.0",
					"input": map[string]any{"type": "object"}, "output": map[string]any{},
					"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "grow.wasm"},
					"limits":          map[string]any{"memMB": 16, "cpuMs": 5000},
				})
				tool, err := e.Load(context.Background(), m, executor.WithModule(wasm))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tool.Close(context.Background()) })
				want := fmt.Sprintf(`{"pages":%d,"leak":0,"m":1}`, pages)
				for i := 0; i < 40; i++ {
					res, err := invoke(t, tool, `{}`)
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					if string(res.Output) != want {
						t.Fatalf("call %d: output %s, want %s (recycled calls so far: %d)", i, res.Output, want, tool.Stats().RecycledCalls)
					}
					time.Sleep(200 * time.Microsecond) // let the refill goroutine recycle
				}
				if n := tool.Stats().RecycledCalls; n < 20 {
					t.Fatalf("only %d of 40 calls were served by a recycled instance", n)
				}
			})
		}
	}
}
