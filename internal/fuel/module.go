package fuel

import (
	"fmt"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// ErrMalformed is wrapped by every error Decode returns for a binary it
// cannot read. It is wasmbin.ErrMalformed: the pass reads with wasmbin's
// Reader and ScanExpr.
var ErrMalformed = wasmbin.ErrMalformed

// ErrUnsupported is wrapped by errors for well-formed binaries that use
// something the pass does not understand (an unknown opcode or section), or
// an encoding wazero and the spec read differently (wasmbin.Refuse). It is
// wasmbin.ErrUnsupported.
var ErrUnsupported = wasmbin.ErrUnsupported

// Bounds the decoder enforces so hostile input costs bounded time and memory.
const (
	// MaxNesting is the deepest block nesting accepted in one expression.
	MaxNesting = wasmbin.MaxNesting
	// maxLocals bounds the locals of one function (wazero allows fewer).
	maxLocals = 1 << 20
)

func appendName(b []byte, s string) []byte {
	b = wasmbin.AppendULEB(b, uint64(len(s)))
	return append(b, s...)
}

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
	r := wasmbin.NewReader(b, 0)
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, r.Fail("missing magic")
	}
	if string(b[4:8]) != "\x01\x00\x00\x00" {
		return nil, r.Errorf(ErrUnsupported, "binary version %x", b[4:8])
	}
	r.SetOffset(8)
	m := &Module{}
	last := 0
	for !r.EOF() {
		id, err := r.Byte()
		if err != nil {
			return nil, err
		}
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		// section readers see only the section; offsets stay absolute
		sr, err := r.Sub(uint64(size))
		if err != nil {
			return nil, err
		}
		body := sr.Rest()
		s := &Section{ID: id}
		if id != secCustom {
			if int(id) >= len(sectionRank) || sectionRank[id] == 0 {
				return nil, sr.Errorf(ErrUnsupported, "section id %d", id)
			}
			if sectionRank[id] <= last {
				return nil, sr.Fail(fmt.Sprintf("section %d out of order or repeated", id))
			}
			last = sectionRank[id]
		}
		switch id {
		case secCustom:
			if s.Name, err = sr.Name(); err != nil {
				return nil, err
			}
			s.Raw, _ = sr.Bytes(uint64(sr.Len()))
		case secImport:
			err = decodeImports(sr, m)
			s.Raw = body
		case secGlobal:
			s.Globals, err = decodeGlobals(sr)
		case secExport:
			s.Exports, err = decodeExports(sr)
		case secStart:
			s.Start, err = sr.U32()
		case secCode:
			s.Funcs, err = decodeCode(sr)
		case secDataCount:
			_, err = sr.U32()
			s.Raw = body
		default:
			// a vector kept whole: only its length is checked here
			_, err = sr.Count(1)
			s.Raw = body
			_, _ = sr.Bytes(uint64(sr.Len()))
		}
		if err != nil {
			return nil, err
		}
		if !sr.EOF() {
			return nil, sr.Fail(fmt.Sprintf("trailing bytes in section %d", id))
		}
		m.Sections = append(m.Sections, s)
	}
	return m, nil
}

func decodeImports(r *wasmbin.Reader, m *Module) error {
	n, err := r.Count(4)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.Name()
		if err != nil {
			return err
		}
		name, err := r.Name()
		if err != nil {
			return err
		}
		kind, err := importDesc(r)
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
		case KindGlobal:
			m.ImportedGlobals++
		}
	}
	return nil
}

// importDesc reads an import's descriptor (what follows its two names) and
// returns its kind.
func importDesc(r *wasmbin.Reader) (byte, error) {
	kind, err := r.Byte()
	if err != nil {
		return 0, err
	}
	switch kind {
	case KindFunc:
		_, err = r.U32()
	case KindTable:
		if err = r.Valtype(); err == nil {
			_, err = r.Limits()
		}
	case KindMemory:
		_, err = r.Limits()
	case KindGlobal:
		if err = r.Valtype(); err == nil {
			err = mutability(r)
		}
	case KindTag:
		var attr byte
		if attr, err = r.Byte(); err == nil && attr != 0 {
			err = r.Fail("bad tag attribute")
		}
		if err == nil {
			_, err = r.U32()
		}
	default:
		return 0, r.Fail(fmt.Sprintf("import kind %d", kind))
	}
	return kind, err
}

func mutability(r *wasmbin.Reader) error {
	c, err := r.Byte()
	if err == nil && c > 1 {
		err = r.Fail("bad mutability")
	}
	return err
}

func decodeGlobals(r *wasmbin.Reader) ([]Global, error) {
	n, err := r.Count(3)
	if err != nil {
		return nil, err
	}
	gs := make([]Global, 0, n)
	for i := uint32(0); i < n; i++ {
		t := r.Offset()
		if err := r.Valtype(); err != nil {
			return nil, err
		}
		if err := mutability(r); err != nil {
			return nil, err
		}
		tb := r.Since(t)
		g := Global{Type: tb[0], Mutable: tb[1] == 1}
		start := r.Offset()
		if err := wasmbin.ScanExpr(r, wasmbin.Refuse, nil); err != nil {
			return nil, err
		}
		g.Init = r.Since(start)
		gs = append(gs, g)
	}
	return gs, nil
}

func decodeExports(r *wasmbin.Reader) ([]Export, error) {
	n, err := r.Count(3)
	if err != nil {
		return nil, err
	}
	es := make([]Export, 0, n)
	for i := uint32(0); i < n; i++ {
		var e Export
		if e.Name, err = r.Name(); err != nil {
			return nil, err
		}
		if e.Kind, err = r.Byte(); err != nil {
			return nil, err
		}
		if e.Kind > KindTag {
			return nil, r.Fail(fmt.Sprintf("export kind %d", e.Kind))
		}
		if e.Index, err = r.U32(); err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

func decodeCode(r *wasmbin.Reader) ([]Func, error) {
	n, err := r.Count(2)
	if err != nil {
		return nil, err
	}
	fs := make([]Func, 0, n)
	for i := uint32(0); i < n; i++ {
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		br, err := r.Sub(uint64(size))
		if err != nil {
			return nil, err
		}
		groups, err := br.Count(2)
		if err != nil {
			return nil, err
		}
		f := Func{Locals: make([]LocalGroup, 0, groups)}
		var total uint64
		for j := uint32(0); j < groups; j++ {
			c, err := br.U32()
			if err != nil {
				return nil, err
			}
			if total += uint64(c); total > maxLocals {
				return nil, br.Fail("too many locals")
			}
			t := br.Offset()
			if err := br.Valtype(); err != nil {
				return nil, err
			}
			f.Locals = append(f.Locals, LocalGroup{Count: c, Type: br.Since(t)[0]})
		}
		start := br.Offset()
		if err := wasmbin.ScanExpr(br, wasmbin.Refuse, nil); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		if !br.EOF() {
			return nil, br.Fail("trailing bytes after a function body")
		}
		f.Expr = br.Since(start)
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
		out = wasmbin.AppendULEB(out, uint64(len(body)))
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
		b = wasmbin.AppendULEB(b, uint64(len(s.Globals)))
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
		b = wasmbin.AppendULEB(b, uint64(len(s.Exports)))
		for _, e := range s.Exports {
			b = appendName(b, e.Name)
			b = append(b, e.Kind)
			b = wasmbin.AppendULEB(b, uint64(e.Index))
		}
		return b
	case secStart:
		return wasmbin.AppendULEB(b, uint64(s.Start))
	case secCode:
		b = wasmbin.AppendULEB(b, uint64(len(s.Funcs)))
		var fb []byte
		for _, f := range s.Funcs {
			fb = f.appendBody(fb[:0])
			b = wasmbin.AppendULEB(b, uint64(len(fb)))
			b = append(b, fb...)
		}
		return b
	}
	return append(b, s.Raw...)
}

func (f *Func) appendBody(b []byte) []byte {
	b = wasmbin.AppendULEB(b, uint64(len(f.Locals)))
	for _, l := range f.Locals {
		b = wasmbin.AppendULEB(b, uint64(l.Count))
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
