// Package fueltest is the Go-loop shape corpus harness that internal/fuel's
// tests and bench/ share: the shapes of testdata/wasm/go/goloops_reactor,
// an instance of it (plain, or metered by sandboxd's fuel pass) on its own
// wazero runtime, and a call timed by the calling thread's CPU clock. It
// imports fuel and wazero, so it is a sub-package of sandboxtest; fuel's
// own tests that use it are in package fuel_test.
package fueltest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// A Shape is one loop shape of the corpus: the export to call (run(shape,
// n) or loop_export(n)) and the iterations of a benchmark call (about
// 20 ms plain on a 2-core EPYC VM).
type Shape struct {
	Name  string
	Shape int32 // run's shape argument; -1 calls loop_export
	N     int64
}

// Shapes lists the corpus in the guest's order.
var Shapes = []Shape{
	{"noinline func", 0, 20_000_000},
	{"wasmexport func", -1, 20_000_000},
	{"calls a func", 1, 10_000_000},
	{"range slice", 2, 20_000_000},
	{"range map", 3, 1_000_000},
	{"nested", 4, 20_000_000},
	{"closure", 5, 20_000_000},
	{"method", 6, 20_000_000},
	{"switch", 7, 20_000_000},
	{"string runes", 8, 5_000_000},
	{"defer/recover", 9, 1_000_000},
	{"interface call", 10, 10_000_000},
	{"append", 11, 5_000_000},
	{"package var", 12, 20_000_000},
}

// Wasm returns testdata/wasm/goloops_reactor.wasm (built by make wasm). It
// is a standard-Go build over sandboxtest.BigGuest but not skipped under
// -short: the corpus tests compile it with no cache in well under the
// seconds a pool of them would take.
func Wasm(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(sandboxtest.Root(tb), "testdata", "wasm", "goloops_reactor.wasm"))
	if err != nil {
		tb.Fatalf("goloops_reactor: %v (run make wasm)", err)
	}
	return b
}

// A Rig is one instance of the corpus, plain or metered, on its own
// runtime (closed when the test ends).
type Rig struct {
	run, export api.Function
	Meter       *fuel.Meter // nil: plain
	ctx         context.Context
}

// NewRig instantiates bin (the corpus, uninstrumented) on a runtime of its
// own: as it is, or instrumented by fuel.Instrument with a Meter set to
// fuel.Unlimited when metered.
func NewRig(tb testing.TB, bin []byte, metered bool) *Rig {
	tb.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	tb.Cleanup(func() { _ = r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := fuel.HostModule(ctx, r); err != nil {
		tb.Fatal(err)
	}
	code := bin
	if metered {
		var err error
		if code, _, err = fuel.Instrument(bin); err != nil {
			tb.Fatal(err)
		}
	}
	c, err := r.CompileModule(ctx, code)
	if err != nil {
		tb.Fatal(err)
	}
	mod, err := r.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		tb.Fatal(err)
	}
	g := &Rig{run: mod.ExportedFunction("run"), export: mod.ExportedFunction("loop_export"), ctx: ctx}
	if metered {
		if g.Meter, err = fuel.NewMeter(mod); err != nil {
			tb.Fatal(err)
		}
		g.Meter.Set(fuel.Unlimited)
		g.ctx = g.Meter.Context(ctx)
	}
	if _, err := mod.ExportedFunction("_initialize").Call(g.ctx); err != nil {
		tb.Fatal(err)
	}
	return g
}

// ThreadCPU is the calling thread's CPU time (the goroutine must be locked
// to its thread).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Call runs shape s for n iterations as a cpuMs-limited sandboxd call does
// when metered: a budget, a deadline on the context, and a poll that reads
// the thread's CPU clock at every refill. It returns the checksum, the
// thread CPU time of the call and the fuel it spent (0 plain).
func (g *Rig) Call(s Shape, n int64, budget int64) (sum int64, cpu time.Duration, spent int64, err error) {
	ctx := g.ctx
	if g.Meter != nil {
		g.Meter.Set(budget)
		cpuEnd := ThreadCPU() + time.Minute
		g.Meter.SetPoll(func() bool { return ThreadCPU() > cpuEnd })
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	runtime.LockOSThread()
	start := ThreadCPU()
	var res []uint64
	if s.Shape < 0 {
		res, err = g.export.Call(ctx, uint64(n))
	} else {
		res, err = g.run.Call(ctx, uint64(s.Shape), uint64(n))
	}
	cpu = ThreadCPU() - start
	runtime.UnlockOSThread()
	if g.Meter != nil {
		spent = budget - g.Meter.Remaining()
		g.Meter.SetPoll(nil)
	}
	if err != nil {
		return 0, cpu, spent, err
	}
	return int64(res[0]), cpu, spent, nil
}
