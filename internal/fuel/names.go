package fuel

import (
	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// fixNames keeps the name section correct for the instrumented module: it
// renumbers the function-names and local-names subsections (and names the
// refill import), drops the label-names subsection (the inserted ifs
// renumber labels) and names the added globals in the global-names
// subsection. A name section it cannot read is dropped (names are optional;
// wrong ones would mislead).
func fixNames(raw []byte, fuel, limit, refill, nimp uint32, hs *helpers) []byte {
	const (
		subFuncs   = 1
		subLocals  = 2
		subLabels  = 3
		subGlobals = 7
	)
	remap := func(f uint32) uint32 {
		if f >= refill {
			return f + nimp
		}
		return f
	}
	importNames := []string{ImportName, ReserveName, ReleaseName}[:nimp]
	addImportNames := func(nb []byte) []byte {
		for i, n := range importNames {
			nb = appendName(wasmbin.AppendULEB(nb, uint64(refill)+uint64(i)), ImportModule+"."+n)
		}
		return nb
	}
	r := wasmbin.NewReader(raw, 0)
	var out []byte
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = wasmbin.AppendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	globalsDone := false
	addGlobals := func(entries []byte, n uint32) {
		body := wasmbin.AppendULEB(nil, uint64(n)+2)
		body = append(body, entries...)
		body = wasmbin.AppendULEB(body, uint64(fuel))
		body = appendName(body, GlobalExport)
		body = wasmbin.AppendULEB(body, uint64(limit))
		body = appendName(body, LimitExport)
		emit(subGlobals, body)
		globalsDone = true
	}
	for !r.EOF() {
		id, err := r.Byte()
		if err != nil {
			return nil
		}
		size, err := r.U32()
		if err != nil {
			return nil
		}
		body, err := r.Bytes(uint64(size))
		if err != nil {
			return nil
		}
		if id > subGlobals && !globalsDone {
			addGlobals(nil, 0)
		}
		br := wasmbin.NewReader(body, 0)
		switch id {
		case subLabels:
			continue
		case subFuncs:
			n, err := br.Count(2)
			if err != nil {
				return nil
			}
			nb := wasmbin.AppendULEB(nil, uint64(n)+uint64(nimp)+uint64(len(hs.bodies)))
			added := false
			for i := uint32(0); i < n; i++ {
				f, err := br.U32()
				if err != nil {
					return nil
				}
				name, err := br.Name()
				if err != nil {
					return nil
				}
				if f >= refill && !added {
					nb = addImportNames(nb)
					added = true
				}
				nb = appendName(wasmbin.AppendULEB(nb, uint64(remap(f))), name)
			}
			if !added {
				nb = addImportNames(nb)
			}
			for i, name := range hs.names() {
				nb = appendName(wasmbin.AppendULEB(nb, uint64(hs.base)+uint64(i)), name)
			}
			emit(id, nb)
			continue
		case subLocals:
			n, err := br.Count(2)
			if err != nil {
				return nil
			}
			nb := wasmbin.AppendULEB(nil, uint64(n))
			for i := uint32(0); i < n; i++ {
				f, err := br.U32()
				if err != nil {
					return nil
				}
				start := br.Offset()
				m, err := br.Count(2)
				if err != nil {
					return nil
				}
				for j := uint32(0); j < m; j++ {
					if _, err := br.U32(); err != nil {
						return nil
					}
					if _, err := br.Name(); err != nil {
						return nil
					}
				}
				nb = wasmbin.AppendULEB(nb, uint64(remap(f)))
				nb = append(nb, body[start:br.Offset()]...)
			}
			emit(id, nb)
			continue
		case subGlobals:
			n, err := br.U32()
			if err != nil || globalsDone {
				return nil
			}
			addGlobals(body[br.Offset():], n)
			continue
		}
		emit(id, body)
	}
	if !globalsDone {
		addGlobals(nil, 0)
	}
	return out
}
