package fuel

import (
	"fmt"
	"math"
	"strconv"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// The names instance reset uses (see Instance reset in the package
// documentation).
const (
	// DirtyExport is the dirty flag of a resettable module.
	DirtyExport = "sandboxd.dirty"
	// GlobalSnapshotExport prefixes the exports of a resettable module's
	// mutable globals.
	GlobalSnapshotExport = "sandboxd.g"
	// HostStatelessModule is the import module whose functions keep no
	// per-instance state (sandboxd's ABI: its state belongs to the call).
	HostStatelessModule = "sandboxd_v1"
	// ExtismStatelessModule is the Extism ABI's import module: sandboxd's
	// Extism kernel belongs to the call, and the vars it keeps per instance
	// are emptied at every call of a recyclable (context-isolated) tool.
	ExtismStatelessModule = "extism:host/env"
)

// statelessWASI lists the WASI preview1 functions that leave nothing behind
// in an instance's host state when the instance has no preopened
// directories and an empty stdin: they read state, or write to stdout and
// stderr, or exit (which closes the instance; the host sees that).
// fd_close, fd_renumber, fd_fdstat_set_flags, fd_seek, path_open and the
// rest are state-changing.
var statelessWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true,
	"environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true,
	"fd_fdstat_get": true, "fd_filestat_get": true,
	"fd_prestat_get": true, "fd_prestat_dir_name": true,
	"fd_read": true, "fd_write": true,
	"poll_oneoff": true, "proc_exit": true,
	"random_get": true, "sched_yield": true,
}

// resetPlan is what the pass adds for instance reset.
type resetPlan struct {
	reason   string          // why the module is not resettable; "" if it is
	stateful map[uint32]bool // imported functions whose calls set the dirty flag
	globals  []uint32        // defined mutable globals to export, by index
}

func (p *resetPlan) refuse(format string, args ...any) {
	if p.reason == "" {
		p.reason = fmt.Sprintf(format, args...)
	}
}

// planReset decides whether m (before instrumentation) is resettable.
func (m *Module) planReset() *resetPlan {
	p := &resetPlan{stateful: map[uint32]bool{}}
	if m.OtherImports {
		p.refuse("it imports a table, memory, global or tag")
	}
	for i, imp := range m.FuncImports {
		switch imp.Module {
		case "wasi_snapshot_preview1":
			if !statelessWASI[imp.Name] {
				p.stateful[uint32(i)] = true
			}
		case HostStatelessModule, ExtismStatelessModule:
		default:
			p.refuse("it imports %s.%s, whose host state the pass does not know", imp.Module, imp.Name)
		}
	}
	if s := m.section(secGlobal); s != nil {
		for i, g := range s.Globals {
			if !g.Mutable {
				continue
			}
			switch g.Type {
			case 0x7f, 0x7e, 0x7d, 0x7c:
				p.globals = append(p.globals, m.ImportedGlobals+uint32(i))
			default:
				p.refuse("global %d is a mutable %#x, which the host cannot save", int(m.ImportedGlobals)+i, g.Type)
			}
		}
		for _, g := range s.Globals {
			p.checkRefs(g.Init)
		}
	}
	if s := m.section(secExport); s != nil {
		for _, e := range s.Exports {
			if e.Kind == KindFunc && p.stateful[e.Index] {
				p.refuse("it exports the state-changing import %d", e.Index)
			}
		}
	}
	if s := m.section(secElement); s != nil {
		if _, err := remapElements(s.Raw, func(f uint32) uint32 {
			if p.stateful[f] {
				p.refuse("an element segment holds the state-changing import %d", f)
			}
			return f
		}, math.MaxUint32); err != nil {
			p.refuse("its element section cannot be read: %v", err)
		}
	}
	if s := m.section(secCode); s != nil {
		for i := range s.Funcs {
			p.scanCode(s.Funcs[i].Expr)
			if p.reason != "" {
				break
			}
		}
	}
	if p.reason != "" {
		p.stateful, p.globals = nil, nil
	}
	return p
}

// checkRefs refuses ref.func of a state-changing import in an initialiser.
func (p *resetPlan) checkRefs(expr []byte) {
	if len(p.stateful) == 0 {
		return
	}
	p.scanCode(expr)
}

// scanCode refuses the instructions that change tables or segments, and any
// use of a state-changing import other than a direct call.
func (p *resetPlan) scanCode(expr []byte) {
	r := wasmbin.NewReader(expr, 0)
	err := wasmbin.ScanExpr(r, wasmbin.Refuse, func(k wasmbin.Op, start, end int) {
		switch op := expr[start]; {
		case op == 0x26:
			p.refuse("it uses table.set")
		case op == 0xfc:
			ir := wasmbin.NewReader(expr[:end], start+1)
			sub, _ := ir.U32()
			switch sub {
			case 9:
				p.refuse("it uses data.drop")
			case 12, 13, 14, 15, 17:
				p.refuse("it uses a table instruction (0xfc %d)", sub)
			}
		case k == wasmbin.OpFunc && op != 0x10:
			ir := wasmbin.NewReader(expr[:end], start+1)
			if f, err := ir.U32(); err == nil && p.stateful[f] {
				p.refuse("it refers to the state-changing import %d other than by a direct call", f)
			}
		}
	})
	if err != nil {
		p.refuse("its code cannot be read: %v", err)
	}
}

// globalSnapshotName is the export name of the k-th mutable global.
func globalSnapshotName(k int) string { return GlobalSnapshotExport + strconv.Itoa(k) }
