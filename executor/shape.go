package executor

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Style is a handler's entry style (ABI v1).
type Style string

// The two entry styles.
const (
	Reactor Style = "reactor"
	Command Style = "command"
)

// tableElemBytes is what one table element costs the host (wazero keeps a
// pointer-sized reference per element).
const tableElemBytes = 8

// checkShape verifies the compiled module against ABI v1 and the memory cap:
// every import comes from sandboxd_v1 or wasi_snapshot_preview1 and exists
// there with the same signature, the entry points are well-formed, and the
// declared minimum memory and tables fit in memMB. It reports the style.
func checkShape(ctx context.Context, r wazero.Runtime, cm wazero.CompiledModule, bin []byte, memLimit int64, memMB int64) (Style, bool, error) {
	shape := func(format string, args ...any) error {
		return toolerr.New(toolerr.HandlerShapeInvalid, format, args...)
	}
	parsed, err := wasmbin.Parse(bin)
	if err != nil {
		return "", false, shape("cannot read module structure: %v", err)
	}
	hosts := map[string]api.Module{abi.ModuleName: r.Module(abi.ModuleName), abi.WASIModuleName: r.Module(abi.WASIModuleName)}
	var tableMin uint64
	for _, im := range parsed.Imports {
		host, ok := hosts[im.Module]
		if !ok {
			return "", false, shape("import %s.%s: module %q is not allowed (only %s and %s)", im.Module, im.Name, im.Module, abi.ModuleName, abi.WASIModuleName)
		}
		if im.Kind != wasmbin.KindFunc {
			return "", false, shape("import %s.%s: %s imports are not provided by %s", im.Module, im.Name, im.Kind, im.Module)
		}
		if _, ok := host.ExportedFunctionDefinitions()[im.Name]; !ok {
			return "", false, shape("import %s.%s: no such function in %s", im.Module, im.Name, im.Module)
		}
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		host, ok := hosts[mod]
		if !ok {
			continue // the metering pass's own import; the guest's were checked above
		}
		want := host.ExportedFunctionDefinitions()[name]
		if !sameTypes(f.ParamTypes(), want.ParamTypes()) || !sameTypes(f.ResultTypes(), want.ResultTypes()) {
			return "", false, shape("import %s.%s has signature %s, want %s", mod, name, sigString(f), sigString(want))
		}
	}
	for _, t := range parsed.Tables {
		tableMin += t.Min
	}

	exports := cm.ExportedFunctions()
	start, hasStart := exports[abi.ExportStart]
	handle, hasHandle := exports[abi.ExportHandle]
	initFn, hasInit := exports[abi.ExportInitialize]
	var style Style
	switch {
	case hasStart:
		if hasInit {
			return "", false, shape("module exports both %s and %s; a handler is a command or a reactor, not both", abi.ExportStart, abi.ExportInitialize)
		}
		if len(start.ParamTypes())+len(start.ResultTypes()) != 0 {
			return "", false, shape("export %s has signature %s, want () -> ()", abi.ExportStart, sigString(start))
		}
		style = Command
	case hasHandle:
		if len(handle.ParamTypes()) != 0 || !sameTypes(handle.ResultTypes(), []api.ValueType{api.ValueTypeI32}) {
			return "", false, shape("export %s has signature %s, want () -> (i32)", abi.ExportHandle, sigString(handle))
		}
		if hasInit && len(initFn.ParamTypes())+len(initFn.ResultTypes()) != 0 {
			return "", false, shape("export %s has signature %s, want () -> ()", abi.ExportInitialize, sigString(initFn))
		}
		if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
			return "", false, shape("reactor does not export its memory as %q", abi.ExportMemory)
		}
		style = Reactor
	default:
		return "", false, shape("module exports no entry point: a handler exports %s (command) or %s (reactor)", abi.ExportStart, abi.ExportHandle)
	}

	var memMin uint64
	for _, m := range cm.ExportedMemories() {
		memMin = max(memMin, uint64(m.Min()))
	}
	for _, m := range cm.ImportedMemories() {
		memMin = max(memMin, uint64(m.Min()))
	}
	need := int64(memMin*limits.PageSize + tableMin*tableElemBytes)
	if need > memLimit {
		return "", false, toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitMemMB, Declared: memMB, Observed: ceilMB(need)},
			fmt.Sprintf("the module's declared minimum memory and tables (%d bytes) exceed memMB %d; refused before running", need, memMB))
	}
	return style, hasInit, nil
}

// tableCap is the element cap for every table of a tool with memLimit bytes:
// the largest power of two whose elements fit in memLimit.
func tableCap(memLimit int64) uint64 {
	n := uint64(max(memLimit/tableElemBytes, 1))
	return 1 << (bits.Len64(n) - 1)
}

func ceilMB(b int64) int64 { return (b + limits.MiB - 1) / limits.MiB }

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sigString(f api.FunctionDefinition) string {
	return fmt.Sprintf("%s -> %s", typesString(f.ParamTypes()), typesString(f.ResultTypes()))
}

func typesString(ts []api.ValueType) string {
	s := "("
	for i, t := range ts {
		if i > 0 {
			s += ", "
		}
		s += api.ValueTypeName(t)
	}
	return s + ")"
}
