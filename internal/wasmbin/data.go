package wasmbin

import (
	"math"
	"slices"
)

// DataInitExport is the function PassiveData adds: it copies the module's
// (merged) data segments into its memory, as instantiation did before they
// were made passive. Names beginning with "sandboxd." are reserved by the
// fuel pass (fuel.ReservedPrefix), so a metered module cannot export it
// itself.
const DataInitExport = "sandboxd.data"

// MaxDataGap is the widest gap between two data segments that MergeData and
// PassiveData fill with zero bytes to make one segment of them. Memory
// starts zeroed, so the filled segment writes what the two did.
const MaxDataGap = 4096

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secExport    = 7
	secStart     = 8
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank is the position of each known section id in the order the
// spec requires (tag between memory and global, data count before code).
var sectionRank = [14]int{
	secType: 1, secImport: 2, secFunction: 3, 4: 4, secMemory: 5, secTag: 6,
	6: 7, secExport: 8, secStart: 9, 9: 10, secDataCount: 11, secCode: 12, secData: 13,
}

// MergeData returns b with its active data segments merged: sorted by
// offset, and neighbours at most MaxDataGap bytes apart joined into one
// segment, the gap filled with zero bytes. A standard Go binary has tens of
// thousands of segments, and wazero evaluates an offset and keeps a record
// for each at every instantiation; merged it has a handful.
//
// It applies only when the result is certain to initialise memory exactly as
// b does: the module defines exactly one memory (imports none), every data
// segment is active in that memory at an `i32.const` offset, within the
// memory's initial size, and no two segments overlap; and no function body
// names a segment by index (memory.init, data.drop): a module may have a
// data count section, which is then rewritten with the new count, only when
// its code uses neither and the count is the data section's. Otherwise, or
// when b is malformed, b itself is returned. Every other section is kept byte
// for byte. It never panics.
func MergeData(b []byte) []byte {
	out, _ := rewriteData(b, false)
	return out
}

// PassiveData is MergeData that also makes the merged segments passive and
// adds an exported function DataInitExport, of type () -> (), doing
// `memory.init` then `data.drop` of each in turn (and a data count section,
// which memory.init requires), so that instantiation leaves memory zeroed
// until the host calls it. An instance whose memory is restored from an
// image taken after initialisation does not call it at all.
//
// The function is not metered: a copy of the whole data for no fuel. The
// drop makes a second call trap at its first instruction, so that a guest
// which reaches it anyway (an index past the end of the original function
// space is invalid there and names it here; the fuel pass shifts indices
// without bounding them) gets at most one such copy per instance, which is
// what instantiating one costs, and can never loop on it.
//
// Besides MergeData's conditions it applies only to a module without a
// start section (a start function runs before the host can call the export)
// that does not export DataInitExport already. The new function comes after
// every existing one, so no function index changes (a "name" section stays
// right). It returns the export name when it rewrote b, else b and "".
func PassiveData(b []byte) ([]byte, string) {
	out, ok := rewriteData(b, true)
	if !ok {
		return b, ""
	}
	return out, DataInitExport
}

// segment is one data segment: bytes at memory offset off.
type segment struct {
	off  uint64
	data []byte
}

// dataPlan is what rewriteData learnt reading the module.
type dataPlan struct {
	secs       []section
	have       [14]int // index+1 in secs of each known section id, 0 if absent
	funcImport uint64  // imported functions
	types      uint64  // entries of the type section
	funcs      uint64  // entries of the function section
	exports    uint64  // entries of the export section
	segs       []segment
}

func rewriteData(b []byte, passive bool) ([]byte, bool) {
	p, ok := readDataPlan(b, passive)
	if !ok {
		return b, false
	}
	merged := mergeSegments(p.segs)
	if !passive && len(merged) == len(p.segs) {
		return b, false // nothing to merge
	}
	// Section bodies are written as pieces, so that segment data and the
	// existing code are copied once, into the result.
	data := [][]byte{AppendULEB(nil, uint64(len(merged)))}
	for _, s := range merged {
		var h []byte
		if passive {
			h = append(h, 1)
		} else {
			h = append(h, 0, 0x41)
			h = AppendSLEB(h, int64(s.off))
			h = append(h, 0x0b)
		}
		data = append(data, AppendULEB(h, uint64(len(s.data))), s.data)
	}
	repl := map[byte][][]byte{secData: data}
	if p.have[secDataCount] != 0 || passive {
		repl[secDataCount] = [][]byte{AppendULEB(nil, uint64(len(merged)))}
	}
	if passive {
		typeIdx := p.types
		funcIdx := p.funcImport + p.funcs
		repl[secType] = p.appendEntry(b, secType, p.types, []byte{0x60, 0, 0})
		repl[secFunction] = p.appendEntry(b, secFunction, p.funcs, AppendULEB(nil, typeIdx))
		exp := AppendULEB(nil, uint64(len(DataInitExport)))
		exp = append(exp, DataInitExport...)
		exp = append(exp, byte(KindFunc))
		exp = AppendULEB(exp, funcIdx)
		repl[secExport] = p.appendEntry(b, secExport, p.exports, exp)
		repl[secCode] = p.appendEntry(b, secCode, p.funcs, initBody(merged))
	}
	return p.assemble(b, repl), true
}

// readDataPlan reads b and reports whether the rewrite applies.
func readDataPlan(b []byte, passive bool) (*dataPlan, bool) {
	p := &dataPlan{}
	lastRank := 0
	for s, err := range sections(b) {
		if err != nil {
			return nil, false
		}
		id := s.id
		if id != secCustom {
			if int(id) >= len(sectionRank) || sectionRank[id] <= lastRank {
				return nil, false // unknown, repeated or out of order
			}
			lastRank = sectionRank[id]
			p.have[id] = len(p.secs) + 1
		}
		p.secs = append(p.secs, s)
	}
	if p.have[secData] == 0 {
		return nil, false
	}
	if passive && p.have[secStart] != 0 {
		return nil, false
	}
	memBytes, ok := p.readModule(b, passive)
	if !ok {
		return nil, false
	}
	var n uint64
	if p.segs, n, ok = p.readSegments(b, memBytes); !ok {
		return nil, false
	}
	if p.have[secDataCount] != 0 && !p.segmentsUnnamed(b, n) {
		return nil, false
	}
	return p, true
}

// segmentsUnnamed reports whether the data count section says n segments
// and no function body names a segment (memory.init, data.drop), so that
// merging them (and writing the new count) changes nothing the code can
// see. Toolchains with bulk memory enabled write a data count section
// whether or not the code needs it (wasi-sdk, wizer: the JS PDK's QuickJS
// plug-ins have 10,000 segments and one). Bodies are read as wazero reads
// them (AsWazero); anything unreadable counts as naming one.
func (p *dataPlan) segmentsUnnamed(b []byte, n uint64) bool {
	if c, ok := count(p.body(b, secDataCount)); !ok || c != n {
		return false
	}
	r := p.body(b, secCode)
	if r == nil {
		return true
	}
	bodies, err := r.ULEB(32)
	if err != nil {
		return false
	}
	named := false
	visit := func(op Op, start, end int) {
		if op == OpOther && r.b[start] == 0xfc {
			sub := &Reader{b: r.b[:end], off: start + 1}
			if v, err := sub.ULEB(32); err != nil || v == 8 || v == 9 { // memory.init, data.drop
				named = true
			}
		}
	}
	for i := uint64(0); i < bodies; i++ {
		size, err := r.ULEB(32)
		if err != nil || size > uint64(len(r.b)-r.off) {
			return false
		}
		end := r.off + int(size)
		body := &Reader{b: r.b[:end], off: r.off}
		if _, err := countLocals(body); err != nil {
			return false
		}
		if err := ScanExpr(body, AsWazero, visit); err != nil || named || body.off != end {
			return false
		}
		r.off = end
	}
	return r.off == len(r.b)
}

// body returns a reader over the body of section id (nil if absent).
func (p *dataPlan) body(b []byte, id byte) *Reader {
	if p.have[id] == 0 {
		return nil
	}
	s := p.secs[p.have[id]-1]
	return &Reader{b: b[:s.end], off: s.body}
}

// readModule checks imports, memory, functions and exports, and returns the
// memory's initial size in bytes.
func (p *dataPlan) readModule(b []byte, passive bool) (uint64, bool) {
	if r := p.body(b, secImport); r != nil {
		m := &Module{}
		if err := parseImports(r, m); err != nil {
			return 0, false
		}
		for _, im := range m.Imports {
			switch im.Kind {
			case KindMemory:
				return 0, false
			case KindFunc:
				p.funcImport++
			}
		}
	}
	r := p.body(b, secMemory)
	if r == nil {
		return 0, false
	}
	if n, err := r.ULEB(32); err != nil || n != 1 {
		return 0, false
	}
	flag, err := r.Byte()
	if err != nil || flag > 1 { // shared and 64-bit memories are left alone
		return 0, false
	}
	r.off--
	lim, err := r.Limits()
	if err != nil || lim.Min > 65536 || r.off != len(r.b) {
		return 0, false
	}
	memBytes := lim.Min * 65536
	if !passive {
		return memBytes, true
	}
	var ok bool
	if p.types, ok = count(p.body(b, secType)); !ok {
		return 0, false
	}
	if p.funcs, ok = count(p.body(b, secFunction)); !ok {
		return 0, false
	}
	if codes, ok := count(p.body(b, secCode)); !ok || codes != p.funcs {
		return 0, false
	}
	if p.funcImport+p.funcs >= math.MaxUint32 || p.types >= math.MaxUint32 {
		return 0, false
	}
	if r := p.body(b, secExport); r != nil {
		n, err := r.ULEB(32)
		if err != nil {
			return 0, false
		}
		p.exports = n
		for i := uint64(0); i < n; i++ {
			name, err := r.Name()
			if err != nil || name == DataInitExport {
				return 0, false
			}
			if _, err := r.Byte(); err != nil {
				return 0, false
			}
			if _, err := r.ULEB(32); err != nil {
				return 0, false
			}
		}
		if r.off != len(r.b) {
			return 0, false
		}
	}
	return memBytes, true
}

// count reads the entry count at the start of a vector section; an absent
// section has none.
func count(r *Reader) (uint64, bool) {
	if r == nil {
		return 0, true
	}
	n, err := r.ULEB(32)
	return n, err == nil
}

// readSegments reads the data section: every segment active in memory 0 at
// an i32.const offset, within memBytes; none overlapping. The result is
// sorted by offset and holds no empty segment.
func (p *dataPlan) readSegments(b []byte, memBytes uint64) ([]segment, uint64, bool) {
	r := p.body(b, secData)
	n, err := r.ULEB(32)
	if err != nil || n == 0 {
		return nil, 0, false
	}
	// Each segment takes at least 4 bytes: never allocate for more.
	segs := make([]segment, 0, min(n, uint64(len(r.b)-r.off)/4))
	for i := uint64(0); i < n; i++ {
		flag, err := r.ULEB(32)
		if err != nil {
			return nil, 0, false
		}
		switch flag {
		case 0:
		case 2:
			if mem, err := r.ULEB(32); err != nil || mem != 0 {
				return nil, 0, false
			}
		default: // passive (1) or unknown
			return nil, 0, false
		}
		if op, err := r.Byte(); err != nil || op != 0x41 { // i32.const
			return nil, 0, false
		}
		off, err := r.SLEB(32)
		if err != nil || off < 0 || off > math.MaxInt32 {
			return nil, 0, false
		}
		if end, err := r.Byte(); err != nil || end != 0x0b {
			return nil, 0, false
		}
		size, err := r.ULEB(32)
		if err != nil || size > uint64(len(r.b)-r.off) {
			return nil, 0, false
		}
		if uint64(off)+size > memBytes {
			return nil, 0, false
		}
		if size > 0 {
			segs = append(segs, segment{off: uint64(off), data: r.b[r.off : r.off+int(size)]})
		}
		r.off += int(size)
	}
	if r.off != len(r.b) {
		return nil, 0, false
	}
	byOffset := func(a, b segment) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	}
	if !slices.IsSortedFunc(segs, byOffset) { // a Go binary's are sorted
		slices.SortStableFunc(segs, byOffset)
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].off < segs[i-1].off+uint64(len(segs[i-1].data)) {
			return nil, 0, false
		}
	}
	return segs, n, true
}

// maxFillSlack is how many zero bytes merging may add beyond the segments'
// own size: the gaps filled are bounded by the data, so that a small module
// of many tiny segments spread MaxDataGap apart cannot make the load
// allocate a thousand times its size.
const maxFillSlack = 1 << 20

// mergeSegments joins sorted, non-overlapping neighbours at most MaxDataGap
// bytes apart, while the zero bytes filled in stay within the segments' own
// size plus maxFillSlack. A segment of one piece keeps its slice of the
// module.
func mergeSegments(segs []segment) []segment {
	fill := uint64(maxFillSlack)
	for _, s := range segs {
		fill += uint64(len(s.data))
	}
	var out []segment
	for i := 0; i < len(segs); {
		j, end := i+1, segs[i].off+uint64(len(segs[i].data))
		for j < len(segs) && segs[j].off-end <= MaxDataGap && segs[j].off-end <= fill {
			fill -= segs[j].off - end
			end = segs[j].off + uint64(len(segs[j].data))
			j++
		}
		s := segs[i]
		if j > i+1 {
			buf := make([]byte, end-s.off)
			for _, t := range segs[i:j] {
				copy(buf[t.off-s.off:], t.data)
			}
			s.data = buf
		}
		out = append(out, s)
		i = j
	}
	return out
}

// initBody is the code entry of the data-init function: for each segment k,
// `i32.const off; i32.const 0; i32.const len; memory.init k 0; data.drop k`.
func initBody(segs []segment) []byte {
	body := []byte{0} // no locals
	for k, s := range segs {
		body = append(body, 0x41)
		body = AppendSLEB(body, int64(int32(uint32(s.off))))
		body = append(body, 0x41, 0, 0x41)
		body = AppendSLEB(body, int64(int32(uint32(len(s.data)))))
		body = append(body, 0xfc, 8)
		body = AppendULEB(body, uint64(k))
		body = append(body, 0, 0xfc, 9)
		body = AppendULEB(body, uint64(k))
	}
	body = append(body, 0x0b)
	return append(AppendULEB(nil, uint64(len(body))), body...)
}

// appendEntry returns the body of vector section id with entry appended
// (n entries before): the new count, the existing entries as they are, the
// entry.
func (p *dataPlan) appendEntry(b []byte, id byte, n uint64, entry []byte) [][]byte {
	var rest []byte
	if r := p.body(b, id); r != nil {
		_, _ = r.ULEB(32) // read by readModule already
		rest = r.b[r.off:]
	}
	return [][]byte{AppendULEB(nil, n+1), rest, entry}
}

// assemble writes b with the bodies of the sections in repl (as pieces)
// replaced, and those absent from b inserted where the section order puts
// them.
func (p *dataPlan) assemble(b []byte, repl map[byte][][]byte) []byte {
	size := len(b)
	for id, body := range repl {
		if p.have[id] != 0 {
			s := p.secs[p.have[id]-1]
			size -= s.end - s.start
		}
		size += 6 // id and size
		for _, piece := range body {
			size += len(piece)
		}
	}
	out := append(make([]byte, 0, size), b[:8]...)
	emit := func(id byte, body [][]byte) {
		n := 0
		for _, piece := range body {
			n += len(piece)
		}
		out = append(out, id)
		out = AppendULEB(out, uint64(n))
		for _, piece := range body {
			out = append(out, piece...)
		}
	}
	// New sections, in section order.
	var pending []byte
	for id := range sectionRank {
		if _, ok := repl[byte(id)]; ok && p.have[id] == 0 {
			pending = append(pending, byte(id))
		}
	}
	slices.SortFunc(pending, func(a, b byte) int { return sectionRank[a] - sectionRank[b] })
	flush := func(rank int) {
		for len(pending) > 0 && sectionRank[pending[0]] < rank {
			emit(pending[0], repl[pending[0]])
			pending = pending[1:]
		}
	}
	for _, s := range p.secs {
		if s.id != secCustom {
			flush(sectionRank[s.id])
		}
		if body, ok := repl[s.id]; ok && s.id != secCustom {
			emit(s.id, body)
			continue
		}
		out = append(out, b[s.start:s.end]...)
	}
	flush(math.MaxInt)
	return out
}

// ExportsFunction reports whether b exports a function named name (false
// when b cannot be read).
func ExportsFunction(b []byte, name string) bool {
	sec, err := findSection(b, secExport)
	if err != nil || sec == nil {
		return false
	}
	n, err := sec.ULEB(32)
	if err != nil {
		return false
	}
	for i := uint64(0); i < n; i++ {
		s, err := sec.Name()
		if err != nil {
			return false
		}
		kind, err := sec.Byte()
		if err != nil {
			return false
		}
		if _, err := sec.ULEB(32); err != nil {
			return false
		}
		if s == name && ExternKind(kind) == KindFunc {
			return true
		}
	}
	return false
}

// findSection returns a reader over the body of b's first section with id,
// or nil when b has none; an error when b cannot be read that far.
func findSection(b []byte, id byte) (*Reader, error) {
	for s, err := range sections(b) {
		if err != nil {
			return nil, err
		}
		if s.id == id {
			return s.reader(b), nil
		}
	}
	return nil, nil
}
