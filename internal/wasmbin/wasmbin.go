// Package wasmbin reads the parts of a WebAssembly binary that sandboxd checks
// before it instantiates a module and that wazero's public API does not
// expose: every import (including tables and globals) and table limits.
//
// It is a reader of module structure only, not a validator: callers compile
// the module with wazero first. It never panics on malformed input.
package wasmbin

import (
	"errors"
	"fmt"
)

// ExternKind is the kind of an import or export.
type ExternKind byte

// Extern kinds.
const (
	KindFunc   ExternKind = 0
	KindTable  ExternKind = 1
	KindMemory ExternKind = 2
	KindGlobal ExternKind = 3
	KindTag    ExternKind = 4
)

func (k ExternKind) String() string {
	switch k {
	case KindFunc:
		return "function"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Import is one entry of the import section.
type Import struct {
	Module, Name string
	Kind         ExternKind
	Table        *Limits // for KindTable
}

// Limits are table limits in elements.
type Limits struct {
	Min    uint64
	Max    uint64
	HasMax bool
}

// Module is what Parse extracts.
type Module struct {
	Imports []Import
	Tables  []Limits // defined tables (imported ones are in Imports)
}

// ErrMalformed is wrapped by every error Parse returns.
var ErrMalformed = errors.New("malformed wasm binary")

type reader struct {
	b   []byte
	off int
}

func (r *reader) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, what, r.off)
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) uleb(maxBits int) (uint64, error) {
	var v uint64
	for shift := 0; shift < maxBits+7; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.fail("LEB128 too long")
}

func (r *reader) name() (string, error) {
	n, err := r.uleb(32)
	if err != nil {
		return "", err
	}
	if n > uint64(len(r.b)-r.off) {
		return "", r.fail("name past end")
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func (r *reader) limits() (Limits, error) {
	flag, err := r.byte()
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	if l.Min, err = r.uleb(64); err != nil {
		return l, err
	}
	if flag&1 != 0 {
		l.HasMax = true
		if l.Max, err = r.uleb(64); err != nil {
			return l, err
		}
	}
	return l, nil
}

// Parse reads the import and table sections of a module binary.
func Parse(b []byte) (*Module, error) {
	r := &reader{b: b}
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, r.fail("missing magic")
	}
	r.off = 8
	m := &Module{}
	for r.off < len(b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.uleb(32)
		if err != nil {
			return nil, err
		}
		if size > uint64(len(b)-r.off) {
			return nil, r.fail("section past end")
		}
		sec := &reader{b: b[:r.off+int(size)], off: r.off}
		switch id {
		case 2:
			if err := parseImports(sec, m); err != nil {
				return nil, err
			}
		case 4:
			if err := parseTables(sec, m); err != nil {
				return nil, err
			}
		}
		r.off += int(size)
	}
	return m, nil
}

func parseImports(r *reader, m *Module) error {
	n, err := r.uleb(32)
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		var im Import
		if im.Module, err = r.name(); err != nil {
			return err
		}
		if im.Name, err = r.name(); err != nil {
			return err
		}
		k, err := r.byte()
		if err != nil {
			return err
		}
		im.Kind = ExternKind(k)
		switch im.Kind {
		case KindFunc:
			_, err = r.uleb(32)
		case KindTable:
			if _, err = r.byte(); err != nil { // reftype
				return err
			}
			var l Limits
			l, err = r.limits()
			im.Table = &l
		case KindMemory:
			_, err = r.limits()
		case KindGlobal:
			if _, err = r.byte(); err == nil {
				_, err = r.byte()
			}
		case KindTag:
			if _, err = r.byte(); err == nil {
				_, err = r.uleb(32)
			}
		default:
			return r.fail("unknown import kind")
		}
		if err != nil {
			return err
		}
		m.Imports = append(m.Imports, im)
		if len(m.Imports) > 100000 {
			return r.fail("too many imports")
		}
	}
	return nil
}

func parseTables(r *reader, m *Module) error {
	n, err := r.uleb(32)
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		if len(m.Tables) > 100000 {
			return r.fail("too many tables")
		}
		first, err := r.byte()
		if err != nil {
			return err
		}
		if first == 0x40 { // table with an initialiser expression (function-references)
			if _, err := r.byte(); err != nil {
				return err
			}
			if _, err = r.byte(); err != nil { // reftype
				return err
			}
		}
		l, err := r.limits()
		if err != nil {
			return err
		}
		m.Tables = append(m.Tables, l)
		if first == 0x40 {
			return nil // the init expression follows; nothing after matters here
		}
	}
	return nil
}

// LimitTables returns b with every defined table's maximum lowered to at most
// maxElems elements (a table without a maximum gets maxElems), so that
// table.grow cannot allocate past a host budget. Tables whose minimum already
// exceeds maxElems are left alone for the caller's own check. b is returned
// unchanged when no table needs a new maximum.
func LimitTables(b []byte, maxElems uint64) ([]byte, error) {
	r := &reader{b: b}
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, r.fail("missing magic")
	}
	r.off = 8
	for r.off < len(b) {
		secStart := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.uleb(32)
		if err != nil {
			return nil, err
		}
		if size > uint64(len(b)-r.off) {
			return nil, r.fail("section past end")
		}
		body := r.off
		end := r.off + int(size)
		if id != 4 {
			r.off = end
			continue
		}
		sec := &reader{b: b[:end], off: body}
		n, err := sec.uleb(32)
		if err != nil {
			return nil, err
		}
		out := appendULEB(nil, n)
		changed := false
		for i := uint64(0); i < n; i++ {
			rt, err := sec.byte()
			if err != nil {
				return nil, err
			}
			if rt == 0x40 {
				return nil, sec.fail("tables with initialiser expressions are not supported")
			}
			flagAt := sec.off
			flag, err := sec.byte()
			if err != nil {
				return nil, err
			}
			if flag > 1 {
				return nil, sec.fail("unsupported table limits flag")
			}
			sec.off = flagAt
			l, err := sec.limits()
			if err != nil {
				return nil, err
			}
			if l.Min <= maxElems && (!l.HasMax || l.Max > maxElems) {
				l.Max, l.HasMax = maxElems, true
				changed = true
			}
			out = append(out, rt)
			if l.HasMax {
				out = append(out, 1)
				out = appendULEB(out, l.Min)
				out = appendULEB(out, l.Max)
			} else {
				out = append(out, 0)
				out = appendULEB(out, l.Min)
			}
		}
		if sec.off != end {
			return nil, sec.fail("trailing bytes in table section")
		}
		if !changed {
			return b, nil
		}
		nb := make([]byte, 0, len(b)+16)
		nb = append(nb, b[:secStart]...)
		nb = append(nb, 4)
		nb = appendULEB(nb, uint64(len(out)))
		nb = append(nb, out...)
		nb = append(nb, b[end:]...)
		return nb, nil
	}
	return b, nil
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
