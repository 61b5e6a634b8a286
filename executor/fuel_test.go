package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
		if tool := load(t, e, fx, nil); !tool.Stats().Metered {
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
// stops a guest with limits-exceeded "fuel" — deterministically: the trap
// comes at the first check (loop header, function entry, host call) at
// which the guest has been charged more than its budget, and Observed (and
// usage.fuel) is what it had been charged there, whatever the timing of
// refills, garbage collections or the race detector. A budget of 1,000,000
// is spent within the first Slice (no refill before the trap), one of
// 5,000,000 after four refills; a goroutine forces garbage collections
// throughout.
//
// spin_command is a Go guest, whose runtime reads the clocks and the random
// source before main and does different work at different times (its
// scheduler and memory allocator), so its count is the same on every run
// only under deterministic clocks and randomness: WithDeterministic, the
// "--deterministic --fuel-budget" contract of docs/conformance.md. The WAT
// loop reads neither and runs under the real ones.
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
	stop := make(chan struct{})
	var gc sync.WaitGroup
	gc.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				runtime.GC()
			}
		}
	})
	defer gc.Wait()
	defer close(stop)
	for _, c := range []struct {
		fx            string
		deterministic bool
	}{{"loop", false}, {"spin_command", true}} {
		for _, budget := range []int64{1_000_000, 5_000_000} {
			limited := newExecutor(t, func(cfg executor.Config) executor.Config {
				if c.deterministic {
					cfg = cfg.WithDeterministic(1)
				}
				return cfg.WithFuelBudget(budget)
			})
			tool := load(t, limited, c.fx, withLimits(64, 60_000))
			var observed []int64
			for i := 0; i < 2; i++ {
				res, err := invoke(t, tool, `{}`)
				wantCode(t, err, toolerr.LimitsExceeded)
				var le *toolerr.LimitsError
				if !errors.As(err, &le) || le.Limit != toolerr.LimitFuel || le.Declared != budget || le.Observed <= budget {
					t.Fatalf("%s, budget %d: %+v (%v)", c.fx, budget, le, err)
				}
				if res == nil || res.Usage.Fuel != le.Observed {
					t.Fatalf("%s, budget %d: usage %+v, observed %d", c.fx, budget, res, le.Observed)
				}
				observed = append(observed, le.Observed)
			}
			if observed[0] != observed[1] {
				t.Fatalf("%s, budget %d: fuel observed %v differs between runs", c.fx, budget, observed)
			}
			t.Logf("%s, budget %d: observed %d", c.fx, budget, observed[0])
		}
	}
}

// A call that ends past its budget with no check left to see it (charged
// per segment, the last segments of a call are paid without a comparison:
// overdraft.wasm's 201 units after its output_set) fails with
// limits-exceeded "fuel" at the end of the call, Observed what it was
// charged, the same on every run; with the budget it needs, it succeeds.
func TestFuelOverdraft(t *testing.T) {
	res, err := invoke(t, load(t, newExecutor(t), "overdraft", nil), `{}`)
	if err != nil || string(res.Output) != `{}` || res.Usage.Fuel <= 201 {
		t.Fatalf("unlimited: %+v %v", res, err)
	}
	need := res.Usage.Fuel
	for _, budget := range []int64{need - 1, need - 200} { // the last check (output_set's charge) passes
		tool := load(t, newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(budget) }), "overdraft", nil)
		for range 2 {
			res, err := invoke(t, tool, `{}`)
			wantCode(t, err, toolerr.LimitsExceeded)
			var le *toolerr.LimitsError
			if !errors.As(err, &le) || le.Limit != toolerr.LimitFuel || le.Declared != budget || le.Observed != need || res.Usage.Fuel != need || res.Output != nil {
				t.Fatalf("budget %d of %d: %+v, usage %+v (%v)", budget, need, le, res, err)
			}
		}
	}
	exact := load(t, newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(need) }), "overdraft", nil)
	if res, err := invoke(t, exact, `{}`); err != nil || string(res.Output) != `{}` || res.Usage.Fuel != need {
		t.Fatalf("budget %d: %+v %v", need, res, err)
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
	if !tool.Stats().Metered {
		t.Fatal("a tool loaded from the fuel cache is not metered")
	}
	if res, err := invoke(t, tool, `{"a":1}`); err != nil || string(res.Output) != `{"a":1}` || res.Usage.Fuel == 0 {
		t.Fatalf("%v %+v", err, res)
	}
}

// F04: a module the pass refuses (here: it exports the reserved name
// sandboxd.fuel) used to run silently unmetered, dropping --fuel-budget and
// usage.fuel. It is refused at load by default, saying why; with the
// operator's opt-in it runs unmetered, stopped by close-on-context-done.
func TestF04FuelOptOut(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(1_000_000) })
	_, err := e.Load(context.Background(), manifestFor(t, "f04_optout", withLimits(16, 60_000)))
	te := wantCode(t, err, toolerr.HandlerShapeInvalid)
	for _, want := range []string{"fuel pass cannot meter", "sandboxd.fuel", "--allow-unmetered"} {
		if !strings.Contains(te.Message, want) {
			t.Errorf("refusal %q does not say %q", te.Message, want)
		}
	}
	// The control, metered, is stopped by the fuel budget.
	wantCode(t, func() error {
		_, err := invoke(t, load(t, e, "loop", withLimits(16, 60_000)), `{}`)
		return err
	}(), toolerr.LimitsExceeded)

	allowed := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithFuelBudget(1_000_000).WithAllowUnmetered(true)
	})
	tool := load(t, allowed, "f04_optout", withLimits(16, 60_000))
	if tool.Stats().Metered {
		t.Fatal("a module the pass refuses reports itself metered")
	}
	// Unmetered: no fuel budget applies; close-on-context-done ends it at
	// the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
	wantCode(t, err, toolerr.DeadlineExceeded)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the unmetered guest was stopped %v after the call started (deadline 200 ms)", d)
	}
	if res == nil || res.Usage.Fuel != 0 {
		t.Errorf("usage %+v: an unmetered call reports no fuel", res)
	}
}

// Host work costs fuel in proportion to its bytes: a fuel budget stops a
// loop of host calls that each move megabytes within a few calls, the same
// way on every run (each of these guests ran for minutes on one unit per
// call, F01).
func TestHostWorkChargesFuel(t *testing.T) {
	const budget = 2_000_000 // fuel units: 32 MB of host work at 1 unit / 16 bytes
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithFuelBudget(budget) })
	for _, g := range latGuests {
		if g.bulk {
			continue // the pass's part (internal/fuel)
		}
		if g.fx == "loop" || g.fx == "lat_calltree" {
			continue // no host calls
		}
		tool := latLoad(t, e, g, 60_000)
		var observed []int64
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			start := time.Now()
			_, err := tool.Invoke(ctx, executor.Request{Input: []byte(g.input)})
			d := time.Since(start)
			cancel()
			var le *toolerr.LimitsError
			if !errors.As(err, &le) || le.Limit != toolerr.LimitFuel {
				t.Fatalf("%s: want limits-exceeded fuel, got %v after %v", g.name, err, d)
			}
			if d > 5*time.Second {
				t.Errorf("%s: the fuel budget took %v to stop the guest", g.name, d)
			}
			observed = append(observed, le.Observed)
		}
		t.Logf("%s: stopped at %d fuel units", g.name, observed[0])
		if observed[0] != observed[1] {
			t.Errorf("%s: fuel observed %v differs between runs", g.name, observed)
		}
	}
}

// Bytes moved by WASI fd_read/fd_write (a command echoing stdin) and by
// input_read/output_set (a reactor echoing its input) are charged: 64 KiB
// more input costs at least 2 × 64 KiB / 16 more fuel (read in, written
// out), where the guests' own instructions for it cost a few hundred.
func TestHostBytesFuelRate(t *testing.T) {
	e := newExecutor(t)
	small := `{"s":"x"}`
	big := `{"s":"` + strings.Repeat("x", 64<<10) + `"}`
	want := int64(2 * (len(big) - len(small)) / 16)
	for _, fx := range []string{"echo_command", "echo_reactor"} {
		tool := load(t, e, fx, nil)
		rs, err := invoke(t, tool, small)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := invoke(t, tool, big)
		if err != nil {
			t.Fatal(err)
		}
		d := rb.Usage.Fuel - rs.Usage.Fuel
		t.Logf("%s: fuel %d (%d bytes) vs %d (%d bytes): +%d, bytes alone +%d", fx, rb.Usage.Fuel, len(big), rs.Usage.Fuel, len(small), d, want)
		if d < want {
			t.Errorf("%s: 64 KiB more input cost %d more fuel, want >= %d", fx, d, want)
		}
	}
}
