package wasmbin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	paths, _ := filepath.Glob("../../testdata/wasm/*.wasm")
	if len(paths) == 0 {
		t.Skip("no fixtures")
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

func TestParseFixtures(t *testing.T) {
	fx := fixtures(t)
	m, err := Parse(fx["forbidden_import.wasm"])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Imports) != 1 || m.Imports[0].Module != "env" || m.Imports[0].Name != "foo" || m.Imports[0].Kind != KindFunc {
		t.Fatalf("imports = %+v", m.Imports)
	}
	for name, b := range fx {
		if _, err := Parse(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A module with a growable table: (table 1 funcref) and nothing else.
var tableModule = []byte("\x00asm\x01\x00\x00\x00" + "\x04\x04\x01\x70\x00\x01")

func TestLimitTables(t *testing.T) {
	out, err := LimitTables(tableModule, 1000)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tables) != 1 || !m.Tables[0].HasMax || m.Tables[0].Max != 1000 || m.Tables[0].Min != 1 {
		t.Fatalf("tables = %+v", m.Tables)
	}
	// Already within the cap: unchanged, same slice.
	again, err := LimitTables(out, 1000)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("second pass changed the module: %v", err)
	}
	// Other sections survive byte for byte.
	for name, b := range fixtures(t) {
		nb, err := LimitTables(b, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pm, _ := Parse(b)
		nm, err := Parse(nb)
		if err != nil || len(pm.Imports) != len(nm.Imports) || len(pm.Tables) != len(nm.Tables) {
			t.Fatalf("%s: reparse %v", name, err)
		}
		for _, tb := range nm.Tables {
			if !tb.HasMax || tb.Max > 1<<20 && tb.Min <= 1<<20 {
				t.Fatalf("%s: table not capped: %+v", name, tb)
			}
		}
	}
}

func TestMalformed(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		[]byte("\x00asm"),
		[]byte("\x00asm\x01\x00\x00\x00\x02\xff\xff\xff\xff\x0f"),
		[]byte("\x00asm\x01\x00\x00\x00\x02\x05\x01\x03env"),
		[]byte("\x00asm\x01\x00\x00\x00\x04\x02\x05\x70"),
	} {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", b, err)
		}
	}
}

func TestLimitTablesMalformed(t *testing.T) {
	for _, b := range [][]byte{
		[]byte("\x00asm"),
		[]byte("\x00asm\x01\x00\x00\x00\x04\x02\x05\x70"),
		[]byte("\x00asm\x01\x00\x00\x00\x04\x03\x01\x70\x07\x01"),
		[]byte("\x00asm\x01\x00\x00\x00\x04\x09\x01\x70"),
	} {
		if _, err := LimitTables(b, 10); !errors.Is(err, ErrMalformed) {
			t.Errorf("LimitTables(%q) = %v, want ErrMalformed", b, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(tableModule)
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x02\x05\x01\x03env"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b)
		_, _ = LimitTables(b, 100)
	})
}
