package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Every fixture compiler we support is metered, and a metered guest is still
// stopped by the CPU budget, the wall deadline and cancellation.
func TestFuelMetering(t *testing.T) {
	e := newExecutor(t)
	for _, fx := range []string{"echo_reactor", "echo_command", "go_echo_reactor", "go_echo_command", "loop", "spin_command", "trap"} {
		if tool := load(t, e, fx, nil); !tool.Metered() {
			t.Errorf("%s is not metered", fx)
		}
	}
	for _, fx := range []string{"loop", "spin_command"} {
		tool := load(t, e, fx, withLimits(64, 60_000))
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		start := time.Now()
		_, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
		cancel()
		wantCode(t, err, toolerr.DeadlineExceeded)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: deadline answered after %v", fx, d)
		}
	}
}

// Fuel is reported in usage, is the same on every run, and a fuel budget
// stops a guest with limits-exceeded "fuel" — deterministically.
func TestFuelBudgetDeterministic(t *testing.T) {
	e := newExecutor(t)
	for _, fx := range []string{"echo_reactor", "echo_command", "counter"} {
		tool := load(t, e, fx, nil)
		var first int64
		for i := 0; i < 3; i++ {
			res, err := invoke(t, tool, `{"message":"same"}`)
			if err != nil {
				t.Fatal(err)
			}
			if res.Usage.Fuel <= 0 {
				t.Fatalf("%s: no fuel in usage %+v", fx, res.Usage)
			}
			if i == 0 {
				first = res.Usage.Fuel
			} else if res.Usage.Fuel != first {
				t.Fatalf("%s: fuel %d then %d", fx, first, res.Usage.Fuel)
			}
		}
	}
	limited := newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(1_000_000) })
	for _, fx := range []string{"loop", "spin_command"} {
		tool := load(t, limited, fx, withLimits(64, 60_000))
		var observed []int64
		for i := 0; i < 2; i++ {
			_, err := invoke(t, tool, `{}`)
			wantCode(t, err, toolerr.LimitsExceeded)
			var le *toolerr.LimitsError
			if !errors.As(err, &le) || le.Limit != toolerr.LimitFuel || le.Declared != 1_000_000 || le.Observed < 1_000_000 {
				t.Fatalf("%s: %+v (%v)", fx, le, err)
			}
			observed = append(observed, le.Observed)
		}
		if observed[0] != observed[1] {
			t.Fatalf("%s: fuel observed %v differs between runs", fx, observed)
		}
	}
}

// The metered module is cached on disk beside the compilation cache, so a
// new process does not rerun the pass.
func TestFuelDiskCache(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c executor.Config) executor.Config { return c.WithCacheDir(dir) }
	load(t, newExecutor(t, cfg), "echo_reactor", nil)
	entries, err := os.ReadDir(filepath.Join(dir, "fuel"))
	if err != nil || len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "v") {
		t.Fatalf("fuel cache: %v %v", entries, err)
	}
	tool := load(t, newExecutor(t, cfg), "echo_reactor", nil)
	if !tool.Metered() {
		t.Fatal("a tool loaded from the fuel cache is not metered")
	}
	if res, err := invoke(t, tool, `{"a":1}`); err != nil || string(res.Output) != `{"a":1}` || res.Usage.Fuel == 0 {
		t.Fatalf("%v %+v", err, res)
	}
}
