package wasmbin

import (
	"fmt"
	"iter"
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

// section is one section of a module: its id byte is at b[start], its body
// is b[body:end].
type section struct {
	id               byte
	start, body, end int
}

// sections yields the sections of the module b in order: after a module
// without the magic, or a section header or body past the end, it yields
// that error (ErrMalformed) and stops.
func sections(b []byte) iter.Seq2[section, error] {
	return func(yield func(section, error) bool) {
		r := &Reader{b: b}
		if len(b) < 8 || string(b[:4]) != "\x00asm" {
			yield(section{}, r.Fail("missing magic"))
			return
		}
		r.off = 8
		for r.off < len(b) {
			start := r.off
			id, err := r.Byte()
			if err != nil {
				yield(section{}, err)
				return
			}
			size, err := r.ULEB(32)
			if err != nil {
				yield(section{}, err)
				return
			}
			if size > uint64(len(b)-r.off) {
				yield(section{}, r.Fail("section past end"))
				return
			}
			s := section{id: id, start: start, body: r.off, end: r.off + int(size)}
			r.off = s.end
			if !yield(s, nil) {
				return
			}
		}
	}
}

// reader returns a reader of s's body in b, offsets counted from b's start.
func (s section) reader(b []byte) *Reader { return &Reader{b: b[:s.end], off: s.body} }

// Parse reads the import and table sections of a module binary.
func Parse(b []byte) (*Module, error) {
	m := &Module{}
	for s, err := range sections(b) {
		if err != nil {
			return nil, err
		}
		switch s.id {
		case secImport:
			err = parseImports(s.reader(b), m)
		case secTable:
			err = parseTables(s.reader(b), m)
		}
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

func parseImports(r *Reader, m *Module) error {
	n, err := r.ULEB(32)
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		var im Import
		if im.Module, err = r.Name(); err != nil {
			return err
		}
		if im.Name, err = r.Name(); err != nil {
			return err
		}
		k, err := r.Byte()
		if err != nil {
			return err
		}
		im.Kind = ExternKind(k)
		switch im.Kind {
		case KindFunc:
			_, err = r.ULEB(32)
		case KindTable:
			if _, err = r.Byte(); err != nil { // reftype
				return err
			}
			var l Limits
			l, err = r.Limits()
			im.Table = &l
		case KindMemory:
			_, err = r.Limits()
		case KindGlobal:
			if _, err = r.Byte(); err == nil {
				_, err = r.Byte()
			}
		case KindTag:
			if _, err = r.Byte(); err == nil {
				_, err = r.ULEB(32)
			}
		default:
			return r.Fail("unknown import kind")
		}
		if err != nil {
			return err
		}
		m.Imports = append(m.Imports, im)
		if len(m.Imports) > 100000 {
			return r.Fail("too many imports")
		}
	}
	return nil
}

func parseTables(r *Reader, m *Module) error {
	n, err := r.ULEB(32)
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		if len(m.Tables) > 100000 {
			return r.Fail("too many tables")
		}
		first, err := r.Byte()
		if err != nil {
			return err
		}
		if first == 0x40 { // table with an initialiser expression (function-references)
			if _, err := r.Byte(); err != nil {
				return err
			}
			if _, err = r.Byte(); err != nil { // reftype
				return err
			}
		}
		l, err := r.Limits()
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
	for s, err := range sections(b) {
		if err != nil {
			return nil, err
		}
		if s.id != secTable {
			continue
		}
		secStart, end := s.start, s.end
		sec := s.reader(b)
		n, err := sec.ULEB(32)
		if err != nil {
			return nil, err
		}
		out := AppendULEB(nil, n)
		changed := false
		for i := uint64(0); i < n; i++ {
			rt, err := sec.Byte()
			if err != nil {
				return nil, err
			}
			if rt == 0x40 {
				return nil, sec.Fail("tables with initialiser expressions are not supported")
			}
			flagAt := sec.off
			flag, err := sec.Byte()
			if err != nil {
				return nil, err
			}
			if flag > 1 {
				return nil, sec.Fail("unsupported table limits flag")
			}
			sec.off = flagAt
			l, err := sec.Limits()
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
				out = AppendULEB(out, l.Min)
				out = AppendULEB(out, l.Max)
			} else {
				out = append(out, 0)
				out = AppendULEB(out, l.Min)
			}
		}
		if sec.off != end {
			return nil, sec.Fail("trailing bytes in table section")
		}
		if !changed {
			return b, nil
		}
		nb := make([]byte, 0, len(b)+16)
		nb = append(nb, b[:secStart]...)
		nb = append(nb, 4)
		nb = AppendULEB(nb, uint64(len(out)))
		nb = append(nb, out...)
		nb = append(nb, b[end:]...)
		return nb, nil
	}
	return b, nil
}
