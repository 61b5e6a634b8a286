package fuel

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// TestResettable checks what the pass adds to a resettable module: the
// mutable globals exported in order, and a dirty flag that only calls of a
// state-changing WASI import set.
func TestResettable(t *testing.T) {
	bin := readFile(t, "testdata/wat/reset.wasm")
	if differentialWith(t, bin, nil) {
		t.Fatal("ran out of fuel")
	}
	out, st := mustInstrument(t, bin)
	if !st.Resettable || st.NotResettable != "" {
		t.Fatalf("stats = %+v, want resettable", st)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := HostModule(ctx, r); err != nil {
		t.Fatal(err)
	}
	mod, err := r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMeter(mod)
	if err != nil {
		t.Fatal(err)
	}
	m.Set(Unlimited)
	g0, g1 := mod.ExportedGlobal(GlobalSnapshotExport+"0"), mod.ExportedGlobal(GlobalSnapshotExport+"1")
	if g0 == nil || g1 == nil || mod.ExportedGlobal(GlobalSnapshotExport+"2") != nil {
		t.Fatal("want exactly two mutable globals exported")
	}
	if g0.Get() != 7 || math.Float64frombits(g1.Get()) != 2.5 {
		t.Fatalf("g0 = %d, g1 = %v", g0.Get(), math.Float64frombits(g1.Get()))
	}
	dirty := mod.ExportedGlobal(DirtyExport)
	call := func(name string) uint64 {
		t.Helper()
		res, err := mod.ExportedFunction(name).Call(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res[0]
	}
	if call("bump") != 8 || g0.Get() != 8 || math.Float64frombits(g1.Get()) != 5 {
		t.Fatalf("after bump: g0 = %d, g1 = %v", g0.Get(), math.Float64frombits(g1.Get()))
	}
	g0.(api.MutableGlobal).Set(7) // what a reset does
	if call("bump") != 8 {
		t.Fatal("a global written through its export did not reach the guest")
	}
	call("write")
	if dirty.Get() != 0 {
		t.Fatal("fd_write marked the instance dirty")
	}
	call("close")
	if dirty.Get() != 1 {
		t.Fatal("fd_close did not mark the instance dirty")
	}
}

// TestNotResettable checks the modules the pass must not call resettable.
func TestNotResettable(t *testing.T) {
	for file, why := range map[string]string{
		"reset_no_tableset": "table.set",
		"reset_no_datadrop": "data.drop",
		"reset_no_reffunc":  "element segment holds the state-changing import 0",
		"reset_no_import":   "env.tick",
		"reset_no_v128":     "mutable 0x7b",
		"features":          "imports a table, memory, global or tag",
	} {
		out, st := mustInstrument(t, readFile(t, "testdata/wat/"+file+".wasm"))
		if st.Resettable || !strings.Contains(st.NotResettable, why) {
			t.Errorf("%s: resettable %v, reason %q; want a reason with %q", file, st.Resettable, st.NotResettable, why)
		}
		if strings.Contains(string(out), DirtyExport) {
			t.Errorf("%s: a module that is not resettable got %s", file, DirtyExport)
		}
	}
}
