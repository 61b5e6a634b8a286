package fuel

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// outcome is everything observable about running a module: per entry point
// its results or error, the host calls it made, and at the end the memory
// and exported globals.
type outcome struct {
	Calls     []string
	Memory    string
	Globals   []string
	Exhausted bool // instrumented only: ran out of fuel (or timed out uninstrumented)
	// Backstop: an instrumented run was stopped by its context deadline
	// (close-on-context-done), not by fuel.
	Backstop bool
}

func (o *outcome) String() string {
	return strings.Join(o.Calls, "\n") + "\nmemory " + o.Memory + "\nglobals " + strings.Join(o.Globals, ",")
}

// maxPages bounds a run's memory (128 MiB); tables are bounded by
// limitTables.
const maxPages = 2048

// limitTables caps every table of bin at 1 Mi elements, as the executor caps
// them by memMB, so table_bomb stops.
func limitTables(t testing.TB, bin []byte) []byte {
	b, err := wasmbin.LimitTables(bin, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// limitTablesErr is limitTables for fuzz inputs, which may not parse.
func limitTablesErr(bin []byte) ([]byte, error) { return wasmbin.LimitTables(bin, 1<<20) }

// frameIndex matches an unnamed function in a wazero stack trace.
var frameIndex = regexp.MustCompile(`\.\$[0-9]+\(`)

// maxHostLog bounds the host-call log a run records.
const maxHostLog = 10000

// runOpts say how to run a module.
type runOpts struct {
	metered bool          // the module is instrumented: set the budget, call StartExport
	budget  int64         // fuel for the whole run (metered)
	timeout time.Duration // wall limit (enforced by close-on-context-done; for a metered run a test-only backstop)
	// providers are modules instantiated first, by name (for imports that
	// are not functions).
	providers map[string][]byte
	// fuel records the fuel left after each call (metered), and the call
	// that ran out, so that two instrumented forms can be compared.
	fuel bool
}

// runModule instantiates bin with WASI and recording stubs for every other
// import, runs its start function, then _start, or _initialize and every
// other exported function (with zero arguments), and records the outcome.
func runModule(t testing.TB, bin []byte, o runOpts) *outcome {
	t.Helper()
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2).WithMemoryLimitPages(maxPages)
	if !o.metered || o.timeout > 0 {
		rc = rc.WithCloseOnContextDone(true)
	}
	r := wazero.NewRuntimeWithConfig(context.Background(), rc)
	defer r.Close(context.Background())
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	for name, p := range o.providers {
		if _, err := r.InstantiateWithConfig(ctx, p, wazero.NewModuleConfig().WithName(name)); err != nil {
			t.Fatalf("provider %s: %v", name, err)
		}
	}
	compiled, err := r.CompileModule(ctx, bin)
	out := &outcome{}
	if err != nil {
		out.Calls = append(out.Calls, "compile: "+err.Error())
		return out
	}
	ctx = WithTableAccount(ctx, unlimitedTables{})
	if o.timeout > 0 { // the wall limit starts after compilation
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var hostLog []string
	logf := func(format string, args ...any) {
		if len(hostLog) < maxHostLog {
			hostLog = append(hostLog, fmt.Sprintf(format, args...))
		}
	}
	stubs := map[string]wazero.HostModuleBuilder{}
	for _, f := range compiled.ImportedFunctions() {
		modName, name, _ := f.Import()
		if modName == wasi_snapshot_preview1.ModuleName || modName == ImportModule {
			continue
		}
		b, ok := stubs[modName]
		if !ok {
			b = r.NewHostModuleBuilder(modName)
			stubs[modName] = b
		}
		params, results := f.ParamTypes(), f.ResultTypes()
		label := modName + "." + name
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
			logf("%s%v", label, normalize(stack[:len(params)], params))
			for i := range results {
				stack[i] = 0
			}
		}), params, results).Export(name)
	}
	for name, b := range stubs {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatalf("stub %s: %v", name, err)
		}
	}
	// wazero names unnamed functions by index in stack traces; undo the
	// pass's renumbering so traces compare equal.
	refill, nimp := -1, 0
	for i, f := range compiled.ImportedFunctions() {
		if m, _, _ := f.Import(); m == ImportModule {
			if refill < 0 {
				refill = i
			}
			nimp++
		}
	}
	unshift := func(s string) string {
		if refill < 0 {
			return s
		}
		return frameIndex.ReplaceAllStringFunc(s, func(fr string) string {
			n, _ := strconv.Atoi(fr[2 : len(fr)-1])
			if n > refill {
				n -= nimp
			}
			return ".$" + strconv.Itoa(n) + "("
		})
	}
	var meter *Meter
	record := func(what string, res []uint64, err error) bool {
		line := what + ": "
		if err != nil {
			line += "error " + dropHelperFrames(unshift(err.Error()))
		} else {
			line += fmt.Sprint(res)
		}
		line += " host " + strings.Join(hostLog, ";")
		hostLog = hostLog[:0]
		if o.fuel && meter != nil {
			line += fmt.Sprintf(" fuel %d", meter.Remaining())
		}
		out.Calls = append(out.Calls, line)
		return err == nil
	}
	mc := wazero.NewModuleConfig().WithName("guest").WithStartFunctions().WithStdout(io.Discard).WithStderr(io.Discard)
	mod, err := r.InstantiateModule(ctx, compiled, mc)
	if err == nil && o.metered {
		if meter, err = NewMeter(mod); err != nil {
			t.Fatal(err)
		}
		meter.Set(o.budget)
		if start := mod.ExportedFunction(StartExport); start != nil {
			_, err = start.Call(ctx)
		}
	}
	exhausted := func(err error) bool {
		if err == nil {
			return false
		}
		if meter != nil && meter.Exhausted() {
			return true
		}
		if o.metered && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			out.Backstop = true
			return true
		}
		return !o.metered && errors.Is(ctx.Err(), context.DeadlineExceeded)
	}
	if exhausted(err) {
		out.Exhausted = true
		return out
	}
	if !record("instantiate", nil, err) {
		return out
	}
	defer mod.Close(context.Background())
	var entries []string
	exports := compiled.ExportedFunctions()
	if _, ok := exports["_start"]; ok {
		entries = []string{"_start"}
	} else {
		if _, ok := exports["_initialize"]; ok {
			entries = append(entries, "_initialize")
		}
		for _, name := range exportNames(t, bin, KindFunc) {
			if name != "_initialize" && name != StartExport {
				entries = append(entries, name)
			}
		}
	}
	for _, name := range entries {
		fn := mod.ExportedFunction(name)
		res, err := fn.Call(ctx, make([]uint64, len(fn.Definition().ParamTypes()))...)
		if exhausted(err) {
			if o.fuel {
				out.Calls = append(out.Calls, name+": out of fuel")
			}
			out.Exhausted = true
			return out
		}
		record(name, normalize(res, fn.Definition().ResultTypes()), err)
		var exit *sys.ExitError
		if errors.As(err, &exit) {
			return out // the module is closed
		}
	}
	if mem := mod.Memory(); mem != nil && !reflect.ValueOf(mem).IsNil() { // wazero returns a typed nil without memory
		b, _ := mem.Read(0, mem.Size())
		out.Memory = fmt.Sprintf("%d bytes sha256 %x", len(b), sha256.Sum256(b))
	}
	for _, name := range exportNames(t, bin, KindGlobal) {
		if name == GlobalExport || name == LimitExport || name == DirtyExport || strings.HasPrefix(name, GlobalSnapshotExport) {
			continue // added by the pass
		}
		if g := mod.ExportedGlobal(name); g != nil {
			out.Globals = append(out.Globals, fmt.Sprintf("%s=%d", name, g.Get()))
		}
	}
	return out
}

// exportNames lists bin's exports of one kind in declaration order.
func exportNames(t testing.TB, bin []byte, kind byte) []string {
	m, err := Decode(bin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if s := m.section(secExport); s != nil {
		for _, e := range s.Exports {
			if e.Kind == kind {
				names = append(names, e.Name)
			}
		}
	}
	return names
}

// normalize replaces reference values, which are host addresses, by 0 (null)
// or 1 (not null), and drops the undefined upper half of 32-bit values.
func normalize(vals []uint64, types []api.ValueType) []uint64 {
	out := make([]uint64, len(vals))
	for i, v := range vals {
		out[i] = v
		if i < len(types) && (types[i] == api.ValueTypeI32 || types[i] == api.ValueTypeF32) {
			out[i] = v & 0xffffffff // the upper half is undefined
		}
		if i < len(types) && (types[i] == 0x70 /* funcref */ || types[i] == api.ValueTypeExternref) && v != 0 {
			out[i] = 1
		}
	}
	return out
}

// dropHelperFrames removes the stack-trace lines of the pass's helper
// functions (a trap inside a bulk instruction's helper has one more frame
// than the same trap in the plain module).
func dropHelperFrames(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	for _, l := range lines {
		if !strings.Contains(l, "."+ReservedPrefix+"bulk.") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
