package fuel

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/toolerr"
)

// seedModules are the small modules fuzz targets start from (the Go
// fixtures are too large to be useful seeds).
func seedModules(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{"testdata/wat/*.wasm", "../../testdata/wasm/*.wasm", "testdata/ttf/00[0-4]*.wasm"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b := readFile(f, file); len(b) < 64<<10 {
				seeds = append(seeds, b)
			}
		}
	}
	return seeds
}

// roundTrip checks that a decoded module encodes to a binary that decodes to
// the same module.
func roundTrip(t testing.TB, m *Module) []byte {
	t.Helper()
	enc := m.Encode()
	m2, err := Decode(enc)
	if err != nil {
		t.Fatalf("re-decoding the encoding failed: %v", err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("decode(encode(m)) != m")
	}
	return enc
}

// TestRoundTrip decodes and re-encodes every module in testdata: the result
// decodes to the same module, re-encodes to itself, and is byte-identical to
// the input except for Go's modules (Go's linker pads some LEB128 sizes,
// which Encode writes minimally).
func TestRoundTrip(t *testing.T) {
	var files []string
	for _, p := range []string{"testdata/wat/*.wasm", "../../testdata/wasm/*.wasm", "testdata/ttf/*.wasm"} {
		files = append(files, fixtures(t, p)...)
	}
	for _, file := range files {
		bin := readFile(t, file)
		m, err := Decode(bin)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		enc := roundTrip(t, m)
		m2, _ := Decode(enc)
		if string(m2.Encode()) != string(enc) {
			t.Errorf("%s: encoding is not a fixed point", file)
		}
		if isGo := m.section(secCustom) != nil && hasCustom(m, "go:buildid"); !isGo && string(enc) != string(bin) {
			t.Errorf("%s: encode(decode(b)) differs from b (%d vs %d bytes)", file, len(enc), len(bin))
		}
	}
}

// FuzzDecode: arbitrary bytes never panic the decoder, and whatever decodes
// round-trips.
func FuzzDecode(f *testing.F) {
	for _, s := range seedModules(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		roundTrip(t, m)
	})
}

// FuzzInstrument: arbitrary bytes never panic the pass; a refusal is
// handler-shape-invalid; and when wazero accepts the input it accepts the
// output too, which decodes and exports the counter.
func FuzzInstrument(f *testing.F) {
	for _, s := range seedModules(f) {
		f.Add(s)
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	f.Cleanup(func() { r.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _, err := Instrument(b)
		if err != nil {
			if !errors.Is(err, toolerr.HandlerShapeInvalid) {
				t.Fatalf("refusal is not handler-shape-invalid: %v", err)
			}
			return
		}
		if _, err := Decode(out); err != nil {
			t.Fatalf("the output does not decode: %v", err)
		}
		in, err := compileGuarded(t, ctx, r, b)
		if err != nil {
			return
		}
		in.Close(ctx)
		c, err := r.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero accepts the input but not the output: %v", err)
		}
		if _, ok := c.ExportedFunctions()[GlobalExport]; ok {
			t.Fatal("the counter is exported as a function")
		}
		c.Close(ctx)
	})
}

func hasCustom(m *Module, name string) bool {
	for _, s := range m.Sections {
		if s.ID == secCustom && s.Name == name {
			return true
		}
	}
	return false
}
