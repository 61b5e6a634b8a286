package fuel

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

// exportModule is a module with a mutable i32 global, a table and handle;
// it exports name as the given kind (index 0), and its handle uses
// table.set when stateful (so the pass finds it not resettable).
func exportModule(name string, kind byte, stateful bool) []byte {
	code := []byte{0x00, 0x41, 0x00, 0x0b}
	if stateful {
		code = []byte{0x00, 0x41, 0x00, 0xd0, 0x70, 0x26, 0x00, 0x41, 0x00, 0x0b}
	}
	return wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x01, 0x7f})),
		wsection(secFunction, wvec([]byte{0x00})),
		wsection(secTable, wvec([]byte{0x70, 0x00, 0x01})),
		wsection(secMemory, wvec([]byte{0x00, 0x01})),
		wsection(secGlobal, wvec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b})),
		wsection(secExport, wvec(wcat(wname("memory"), []byte{KindMemory, 0}), wcat(wname("handle"), []byte{KindFunc, 0}),
			wcat(wname(name), []byte{kind, 0}))),
		wsection(secCode, wvec(append(wasmbin.AppendULEB(nil, uint64(len(code))), code...))))
}

// TestF02F04ReservedNames: every export name beginning with "sandboxd." is
// refused, in resettable and non-resettable modules alike (F02: a
// non-resettable module exporting its own sandboxd.dirty was recycled), as
// handler-shape-invalid; so is an import from sandboxd_fuel.
func TestF02F04ReservedNames(t *testing.T) {
	if !wazeroAccepts(t, exportModule("ok", KindGlobal, true)) {
		t.Fatal("wazero refuses the base module")
	}
	for _, stateful := range []bool{false, true} {
		_, st, err := Instrument(exportModule("sandboxd_dirty", KindGlobal, stateful))
		if err != nil {
			t.Fatalf("a module exporting sandboxd_dirty (not reserved) was refused: %v", err)
		}
		if st.Resettable == stateful {
			t.Fatalf("stateful %v: resettable %v", stateful, st.Resettable)
		}
		for _, name := range []string{DirtyExport, GlobalExport, LimitExport, StartExport, "sandboxd.g0", "sandboxd.g7", "sandboxd.", "sandboxd.future"} {
			for _, kind := range []byte{KindGlobal, KindFunc, KindMemory, KindTable} {
				bin := exportModule(name, kind, stateful)
				if !wazeroAccepts(t, bin) {
					t.Fatalf("wazero refuses the module exporting %q", name)
				}
				_, _, err := Instrument(bin)
				if err == nil || !errors.Is(err, toolerr.HandlerShapeInvalid) || !errors.Is(err, ErrUnsupported) {
					t.Errorf("stateful %v: export %q kind %d: %v, want a refusal", stateful, name, kind, err)
				}
			}
		}
	}
	imp := wcat([]byte("\x00asm\x01\x00\x00\x00"),
		wsection(secType, wvec([]byte{0x60, 0x00, 0x00})),
		wsection(secImport, wvec(wcat(wname(ImportModule), wname("anything"), []byte{KindFunc, 0}))))
	if _, _, err := Instrument(imp); err == nil {
		t.Error("an import from sandboxd_fuel was accepted")
	}
}
