package fuel

import (
	"fmt"
	"math"
	"strings"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// addType appends the function type sig (parameter value types, "/",
// result value types) and returns its index.
func (m *Module) addType(sig string) (uint32, error) {
	s := m.ensureSection(secType)
	r := wasmbin.NewReader(s.Raw, 0)
	var n uint32
	if len(s.Raw) > 0 {
		var err error
		if n, err = r.Count(1); err != nil {
			return 0, err
		}
	}
	if n == math.MaxUint32 {
		return 0, fmt.Errorf("%w: too many types", ErrMalformed)
	}
	params, results, _ := strings.Cut(sig, "/")
	raw := wasmbin.AppendULEB(nil, uint64(n)+1)
	raw = append(raw, s.Raw[r.Offset():]...)
	raw = wasmbin.AppendULEB(append(raw, 0x60), uint64(len(params)))
	raw = wasmbin.AppendULEB(append(raw, params...), uint64(len(results)))
	s.Raw = append(raw, results...)
	return n, nil
}

// importFunc is a function the pass imports from ImportModule.
type importFunc struct {
	name, sig string
	typeIdx   uint32
}

// addImports appends the pass's function imports from ImportModule.
func (m *Module) addImports(fs []importFunc) error {
	s := m.ensureSection(secImport)
	r := wasmbin.NewReader(s.Raw, 0)
	var n uint32
	entries := 0
	if len(s.Raw) > 0 {
		var err error
		if n, err = r.Count(4); err != nil {
			return err
		}
		entries = r.Offset()
		for i := uint32(0); i < n; i++ {
			mod, err := r.Name()
			if err != nil {
				return err
			}
			if mod == ImportModule {
				return fmt.Errorf("%w: the module imports from the reserved module %q", ErrUnsupported, ImportModule)
			}
			if _, err := r.Name(); err != nil {
				return err
			}
			if _, err := importDesc(r); err != nil {
				return err
			}
		}
	}
	raw := wasmbin.AppendULEB(nil, uint64(n)+uint64(len(fs)))
	raw = append(raw, s.Raw[entries:]...)
	for _, f := range fs {
		raw = appendName(raw, ImportModule)
		raw = appendName(raw, f.name)
		raw = append(raw, KindFunc)
		raw = wasmbin.AppendULEB(raw, uint64(f.typeIdx))
	}
	s.Raw = raw
	return nil
}

// remapElements renumbers the function indices of an element section.
// Expressions may read only the module's own globals (fewer than
// globals).
func remapElements(raw []byte, remap func(uint32) uint32, globals uint32) ([]byte, error) {
	r := wasmbin.NewReader(raw, 0)
	n, err := r.Count(1)
	if err != nil {
		return nil, err
	}
	out := wasmbin.AppendULEB(make([]byte, 0, len(raw)+16), uint64(n))
	expr := func() error {
		start := r.Offset()
		if err := wasmbin.ScanExpr(r, wasmbin.Refuse, nil); err != nil {
			return err
		}
		e, _, err := transformExpr(r.Since(start), remap, nil, bounds{globals: globals})
		out = append(out, e...)
		return err
	}
	copyByte := func() error {
		c, err := r.Byte()
		out = append(out, c)
		return err
	}
	copyU32 := func() error {
		v, err := r.U32()
		out = wasmbin.AppendULEB(out, uint64(v))
		return err
	}
	for i := uint32(0); i < n; i++ {
		flags, err := r.U32()
		if err != nil {
			return nil, err
		}
		if flags > 7 {
			return nil, r.Fail("bad element segment flags")
		}
		out = wasmbin.AppendULEB(out, uint64(flags))
		if flags&2 != 0 && flags&1 == 0 { // explicit table index
			if err := copyU32(); err != nil {
				return nil, err
			}
		}
		if flags&1 == 0 { // active: offset expression
			if err := expr(); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			if err := copyByte(); err != nil {
				return nil, err
			}
		}
		cnt, err := r.Count(1)
		if err != nil {
			return nil, err
		}
		out = wasmbin.AppendULEB(out, uint64(cnt))
		for j := uint32(0); j < cnt; j++ {
			if flags&4 != 0 {
				err = expr()
			} else {
				var f uint32
				if f, err = r.U32(); err == nil {
					out = wasmbin.AppendULEB(out, uint64(remap(f)))
				}
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if !r.EOF() {
		return nil, r.Fail("trailing bytes in the element section")
	}
	return out, nil
}
