package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// imageAnswer is image_reactor's output.
type imageAnswer struct {
	OK    int    `json:"ok"`
	Pages int    `json:"pages"`
	FD1   int    `json:"fd1"`
	Rand  string `json:"rand"`
}

func imageCall(t *testing.T, tool *executor.Tool, input string) (imageAnswer, error) {
	t.Helper()
	res, err := invoke(t, tool, input)
	if err != nil {
		return imageAnswer{}, err
	}
	var a imageAnswer
	if err := json.Unmarshal(res.Output, &a); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	return a, nil
}

// Every instance of a context-isolated or strict tool after the first is
// loaded from the tool's image (its memory mapped copy-on-write, 640 KiB
// here), and every call still sees exactly the state _initialize left: the
// image's memory, globals and memory size, fd 1 open — after clean calls,
// traps, memory growth and fd_close alike, pooled or not, recycled or not.
func TestImageInstancesAreFresh(t *testing.T) {
	calls := []struct {
		input string
		trap  bool
	}{
		{`{}`, false}, {`{}`, false},
		{`{"a":1}`, true}, // traps after changing its state
		{`{}`, false},
		{`{"aa":1}`, false}, // grows memory
		{`{}`, false},
		{`{"aaa":1}`, false}, // closes fd 1 after answering
		{`{}`, false}, {`{}`, false},
	}
	for _, tc := range []struct {
		name    string
		posture string
		pool    int
		recycle bool
	}{
		{"context-isolated pooled", "context-isolated", 2, true},
		{"context-isolated pooled, recycling off", "context-isolated", 2, false},
		{"context-isolated unpooled", "context-isolated", 0, true},
		{"strict pooled", "strict", 2, true},
		{"strict unpooled", "strict", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config {
				return c.WithPoolSize(tc.pool).WithRecycling(tc.recycle)
			})
			tool := load(t, e, "image_reactor", func(m map[string]any) { m["sandbox"] = tc.posture })
			var rand string
			for round := 0; round < 4; round++ {
				for i, c := range calls {
					a, err := imageCall(t, tool, c.input)
					if c.trap {
						wantCode(t, err, toolerr.HandlerTrap)
						continue
					}
					if err != nil {
						t.Fatalf("round %d call %d (%s): %v", round, i, c.input, err)
					}
					if a.OK != 1 || a.Pages != 10 || a.FD1 != 1 {
						t.Fatalf("round %d call %d (%s): %+v: not the state _initialize left", round, i, c.input, a)
					}
					if rand == "" {
						rand = a.Rand
					}
				}
			}
			n := tool.Stats().ImageInstances
			t.Logf("%d instances loaded from the image, %d calls served by a recycled instance", n, tool.Stats().RecycledCalls)
			if n < 4 {
				t.Fatalf("only %d instances were loaded from the tool's image", n)
			}
			if tc.posture == "strict" && tool.Stats().RecycledCalls != 0 {
				t.Fatalf("a strict tool recycled %d instances", tool.Stats().RecycledCalls)
			}
		})
	}
}

// The values a guest drew during _initialize are its image's, the same for
// every instance of the tool; WithInstanceImages(false) with recycling off
// gives every call an instance that drew its own.
func TestImageSharesInitRandomness(t *testing.T) {
	draw := func(t *testing.T, images bool) map[string]bool {
		e := newExecutor(t, func(c executor.Config) executor.Config {
			return c.WithPoolSize(0).WithRecycling(false).WithInstanceImages(images)
		})
		tool := load(t, e, "image_reactor", func(m map[string]any) { m["sandbox"] = "strict" })
		seen := map[string]bool{}
		for i := 0; i < 6; i++ {
			a, err := imageCall(t, tool, `{}`)
			if err != nil || a.OK != 1 {
				t.Fatalf("call %d: %+v, %v", i, a, err)
			}
			seen[a.Rand] = true
		}
		if !images && tool.Stats().ImageInstances != 0 {
			t.Fatalf("images off, yet %d instances came from an image", tool.Stats().ImageInstances)
		}
		return seen
	}
	if on := draw(t, true); len(on) != 1 {
		t.Fatalf("instances loaded from one image drew %d different values in _initialize", len(on))
	}
	if off := draw(t, false); len(off) != 6 {
		t.Fatalf("with images off, 6 instances drew only %d different values in _initialize", len(off))
	}
}

// An _initialize that changes host state (closes fd 1) gives its tool no
// image: a loaded instance would have fd 1 open, unlike one that ran
// _initialize. Every instance runs its own.
func TestImageRefusedAfterDirtyInit(t *testing.T) {
	for _, posture := range []string{"context-isolated", "strict"} {
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(0) })
		tool := load(t, e, "image_dirty_init", func(m map[string]any) { m["sandbox"] = posture })
		for i := 0; i < 4; i++ {
			res, err := invoke(t, tool, `{}`)
			if err != nil || string(res.Output) != `{"inits":1,"fd1":0}` {
				t.Fatalf("%s call %d: %s, %v", posture, i, res.Output, err)
			}
		}
		if n := tool.Stats().ImageInstances; n != 0 {
			t.Fatalf("%s: %d instances were loaded from an image of a dirty _initialize", posture, n)
		}
	}
}

// Standard-Go guests: package state never carries over, and instances are
// loaded from the image, under concurrent calls of different tenants.
func TestImageGoGuest(t *testing.T) {
	for _, tc := range []struct {
		name, posture string
		pool          int
		wantImage     bool // every call needs a new instance
	}{
		{"context-isolated pooled, recycled", "context-isolated", 2, false},
		{"context-isolated unpooled", "context-isolated", 0, true},
		{"strict pooled", "strict", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(tc.pool) })
			tool := load(t, e, "counter_reactor", func(m map[string]any) { m["sandbox"] = tc.posture })
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						res, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`), Context: executor.CallContext{TenantID: fmt.Sprintf("t%d", g), RunID: "r"}})
						if err != nil || string(res.Output) != `{"count":1}` {
							errs <- fmt.Errorf("tenant %d call %d: %v %v", g, i, res, err)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			t.Logf("%d instances from the image, %d recycled calls", tool.Stats().ImageInstances, tool.Stats().RecycledCalls)
			if tc.wantImage && tool.Stats().ImageInstances < 30 {
				t.Fatalf("only %d instances of the Go guest were loaded from its image", tool.Stats().ImageInstances)
			}
		})
	}
}

// A small memory (one page: the image is a copy, not a mapping) loaded
// into a fresh instance — whose passive data segments left its memory all
// zero — reads exactly as _initialize left it, its data segments' bytes
// included, after traps, growth and fd_close in earlier calls.
func TestImageSmallMemoryClones(t *testing.T) {
	for _, pool := range []int{0, 2} {
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(pool) })
		tool := load(t, e, "state_reactor", func(m map[string]any) { m["sandbox"] = "strict" })
		for i, in := range []string{`{}`, `{"a":1}`, `{}`, `{"aa":1}`, `{}`, `{"aaa":1}`, `{}`, `{}`} {
			res, err := invoke(t, tool, in)
			if in == `{"a":1}` {
				wantCode(t, err, toolerr.HandlerTrap)
				continue
			}
			want := freshState
			if in == `{"aa":1}` {
				want = `{"g":1,"m":1,"pages":2,"fd1":1}`
			}
			if err != nil || string(res.Output) != want {
				t.Fatalf("pool %d call %d (%s): %v %v, want %s", pool, i, in, res, err, want)
			}
		}
		if n := tool.Stats().ImageInstances; n < 4 {
			t.Fatalf("pool %d: only %d instances were loaded from the image", pool, n)
		}
	}
}
