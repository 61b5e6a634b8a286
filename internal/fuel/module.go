package fuel

import "fmt"

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank is the position a non-custom section must have in a binary
// (the tag section sits between memory and global); 0 means unknown.
var sectionRank = [14]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secTag: 6, secGlobal: 7, secExport: 8, secStart: 9, secElement: 10,
	secDataCount: 11, secCode: 12, secData: 13,
}

// Extern kinds of imports and exports.
const (
	KindFunc   byte = 0
	KindTable  byte = 1
	KindMemory byte = 2
	KindGlobal byte = 3
	KindTag    byte = 4
)

// Module is a decoded binary: its sections in order. The sections the pass
// rewrites (global, export, start, code) are decoded into fields; every
// other section keeps its body bytes in Raw (after its framing and, for
// imports, its entries were checked).
type Module struct {
	Sections []*Section
	// ImportedFuncs and ImportedGlobals count the imports of each kind: the
	// module's own functions and globals are numbered after them.
	ImportedFuncs, ImportedGlobals uint32
	// FuncImports names the imported functions, in index order.
	FuncImports []FuncImport
	// OtherImports reports an import of a table, memory, global or tag.
	OtherImports bool
}

// FuncImport is the module and field name of an imported function.
type FuncImport struct{ Module, Name string }

// Section is one section. ID is the section id; Name is a custom section's
// name. Exactly one of the content fields is meaningful, by ID.
type Section struct {
	ID   byte
	Name string

	Raw     []byte   // every section but global, export, start and code
	Globals []Global // secGlobal
	Exports []Export // secExport
	Start   uint32   // secStart
	Funcs   []Func   // secCode
}

// Global is a defined global: its type bytes (value type and mutability) and
// its initialiser expression including the closing end.
type Global struct {
	Type    byte
	Mutable bool
	Init    []byte
}

// Export is one export.
type Export struct {
	Name  string
	Kind  byte
	Index uint32
}

// Func is one function body: its local declarations and its expression
// (instructions including the final end).
type Func struct {
	Locals []LocalGroup
	Expr   []byte
}

// LocalGroup declares Count locals of one value type.
type LocalGroup struct {
	Count uint32
	Type  byte
}

// Decode reads a binary module. It checks the framing of every section, the
// order of the sections, and the encoding of every entry of the sections it
// decodes and of the import section; it leaves typing to a validator. Errors
// wrap ErrMalformed or ErrUnsupported. Decode never panics and uses time and
// memory linear in len(b).
func Decode(b []byte) (*Module, error) {
	r := &reader{b: b}
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, r.fail("missing magic")
	}
	if string(b[4:8]) != "\x01\x00\x00\x00" {
		return nil, r.errf(ErrUnsupported, "binary version %x", b[4:8])
	}
	r.off = 8
	m := &Module{}
	last := 0
	for !r.eof() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		// section readers see only the section; offsets stay absolute
		sr := &reader{b: b[:r.off], off: r.off - len(body)}
		s := &Section{ID: id}
		if id != secCustom {
			if int(id) >= len(sectionRank) || sectionRank[id] == 0 {
				return nil, sr.errf(ErrUnsupported, "section id %d", id)
			}
			if sectionRank[id] <= last {
				return nil, sr.fail(fmt.Sprintf("section %d out of order or repeated", id))
			}
			last = sectionRank[id]
		}
		switch id {
		case secCustom:
			if s.Name, err = sr.name(); err != nil {
				return nil, err
			}
			s.Raw = sr.b[sr.off:]
			sr.off = len(sr.b)
		case secImport:
			err = decodeImports(sr, m)
			s.Raw = body
		case secGlobal:
			s.Globals, err = decodeGlobals(sr)
		case secExport:
			s.Exports, err = decodeExports(sr)
		case secStart:
			s.Start, err = sr.u32()
		case secCode:
			s.Funcs, err = decodeCode(sr)
		case secDataCount:
			_, err = sr.u32()
			s.Raw = body
		default:
			// a vector kept whole: only its length is checked here
			_, err = sr.count(1)
			s.Raw = body
			sr.off = len(sr.b)
		}
		if err != nil {
			return nil, err
		}
		if !sr.eof() {
			return nil, sr.fail(fmt.Sprintf("trailing bytes in section %d", id))
		}
		m.Sections = append(m.Sections, s)
	}
	return m, nil
}

func decodeImports(r *reader, m *Module) error {
	n, err := r.count(4)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return err
		}
		name, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		if kind != KindFunc {
			m.OtherImports = true
		}
		switch kind {
		case KindFunc:
			m.ImportedFuncs++
			m.FuncImports = append(m.FuncImports, FuncImport{mod, name})
			_, err = r.u32()
		case KindTable:
			if err = r.valtype(); err == nil {
				err = r.limits()
			}
		case KindMemory:
			err = r.limits()
		case KindGlobal:
			m.ImportedGlobals++
			if err = r.valtype(); err == nil {
				err = r.mutability()
			}
		case KindTag:
			var attr byte
			if attr, err = r.byte(); err == nil && attr != 0 {
				err = r.fail("bad tag attribute")
			}
			if err == nil {
				_, err = r.u32()
			}
		default:
			return r.fail(fmt.Sprintf("import kind %d", kind))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if flag > 7 {
		return r.fail("bad limits flag")
	}
	bits := uint(32)
	if flag&4 != 0 { // 64-bit memory
		bits = 64
	}
	if _, err := r.uleb(bits); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.uleb(bits)
	}
	return err
}

func (r *reader) mutability() error {
	c, err := r.byte()
	if err == nil && c > 1 {
		err = r.fail("bad mutability")
	}
	return err
}

func decodeGlobals(r *reader) ([]Global, error) {
	n, err := r.count(3)
	if err != nil {
		return nil, err
	}
	gs := make([]Global, 0, n)
	for i := uint32(0); i < n; i++ {
		t := r.off
		if err := r.valtype(); err != nil {
			return nil, err
		}
		if err := r.mutability(); err != nil {
			return nil, err
		}
		g := Global{Type: r.b[t], Mutable: r.b[t+1] == 1}
		start := r.off
		if err := scanExpr(r, nil); err != nil {
			return nil, err
		}
		g.Init = r.b[start:r.off]
		gs = append(gs, g)
	}
	return gs, nil
}

func decodeExports(r *reader) ([]Export, error) {
	n, err := r.count(3)
	if err != nil {
		return nil, err
	}
	es := make([]Export, 0, n)
	for i := uint32(0); i < n; i++ {
		var e Export
		if e.Name, err = r.name(); err != nil {
			return nil, err
		}
		if e.Kind, err = r.byte(); err != nil {
			return nil, err
		}
		if e.Kind > KindTag {
			return nil, r.fail(fmt.Sprintf("export kind %d", e.Kind))
		}
		if e.Index, err = r.u32(); err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

func decodeCode(r *reader) ([]Func, error) {
	n, err := r.count(2)
	if err != nil {
		return nil, err
	}
	fs := make([]Func, 0, n)
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		br := &reader{b: r.b[:r.off], off: r.off - len(body)}
		groups, err := br.count(2)
		if err != nil {
			return nil, err
		}
		f := Func{Locals: make([]LocalGroup, 0, groups)}
		var total uint64
		for j := uint32(0); j < groups; j++ {
			c, err := br.u32()
			if err != nil {
				return nil, err
			}
			if total += uint64(c); total > maxLocals {
				return nil, br.fail("too many locals")
			}
			t := br.off
			if err := br.valtype(); err != nil {
				return nil, err
			}
			f.Locals = append(f.Locals, LocalGroup{Count: c, Type: br.b[t]})
		}
		start := br.off
		if err := scanExpr(br, nil); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		if !br.eof() {
			return nil, br.fail("trailing bytes after a function body")
		}
		f.Expr = br.b[start:]
		fs = append(fs, f)
	}
	return fs, nil
}

// Encode returns the binary form of m.
func (m *Module) Encode() []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	var body []byte
	for _, s := range m.Sections {
		body = s.appendBody(body[:0])
		out = append(out, s.ID)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out
}

func (s *Section) appendBody(b []byte) []byte {
	switch s.ID {
	case secCustom:
		b = appendName(b, s.Name)
		return append(b, s.Raw...)
	case secGlobal:
		b = appendULEB(b, uint64(len(s.Globals)))
		for _, g := range s.Globals {
			mut := byte(0)
			if g.Mutable {
				mut = 1
			}
			b = append(b, g.Type, mut)
			b = append(b, g.Init...)
		}
		return b
	case secExport:
		b = appendULEB(b, uint64(len(s.Exports)))
		for _, e := range s.Exports {
			b = appendName(b, e.Name)
			b = append(b, e.Kind)
			b = appendULEB(b, uint64(e.Index))
		}
		return b
	case secStart:
		return appendULEB(b, uint64(s.Start))
	case secCode:
		b = appendULEB(b, uint64(len(s.Funcs)))
		var fb []byte
		for _, f := range s.Funcs {
			fb = f.appendBody(fb[:0])
			b = appendULEB(b, uint64(len(fb)))
			b = append(b, fb...)
		}
		return b
	}
	return append(b, s.Raw...)
}

func (f *Func) appendBody(b []byte) []byte {
	b = appendULEB(b, uint64(len(f.Locals)))
	for _, l := range f.Locals {
		b = appendULEB(b, uint64(l.Count))
		b = append(b, l.Type)
	}
	return append(b, f.Expr...)
}

// section returns m's section with the given id, or nil.
func (m *Module) section(id byte) *Section {
	for _, s := range m.Sections {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// ensureSection returns m's section with id, inserting an empty one at its
// place in the section order if there is none.
func (m *Module) ensureSection(id byte) *Section {
	if s := m.section(id); s != nil {
		return s
	}
	s := &Section{ID: id}
	at := len(m.Sections)
	for i, o := range m.Sections {
		if o.ID != secCustom && sectionRank[o.ID] > sectionRank[id] {
			at = i
			break
		}
	}
	m.Sections = append(m.Sections, nil)
	copy(m.Sections[at+1:], m.Sections[at:])
	m.Sections[at] = s
	return s
}
