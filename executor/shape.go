package executor

import (
	"fmt"
	"math/bits"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Style is a handler's entry style.
type Style string

// The two entry styles.
const (
	Reactor Style = "reactor"
	Command Style = "command"
)

// tableElemBytes is what one table element costs the host (wazero keeps a
// pointer-sized reference per element).
const tableElemBytes = 8

// checkImports verifies that every import of the module comes from one of
// hosts (module name → instantiated host module) and exists there as a
// function with the same signature. allowed names the modules for the
// message.
func checkImports(cm wazero.CompiledModule, parsed *wasmbin.Module, hosts map[string]api.Module, allowed string) error {
	for _, im := range parsed.Imports {
		host, ok := hosts[im.Module]
		if !ok {
			return shapeErr("import %s.%s: module %q is not allowed (only %s)", im.Module, im.Name, im.Module, allowed)
		}
		if im.Kind != wasmbin.KindFunc {
			return shapeErr("import %s.%s: %s imports are not provided by %s", im.Module, im.Name, im.Kind, im.Module)
		}
		if _, ok := host.ExportedFunctionDefinitions()[im.Name]; !ok {
			return shapeErr("import %s.%s: no such function in %s", im.Module, im.Name, im.Module)
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
			return shapeErr("import %s.%s has signature %s, want %s", mod, name, sigString(f), sigString(want))
		}
	}
	return nil
}

func shapeErr(format string, args ...any) error {
	return toolerr.New(toolerr.HandlerShapeInvalid, format, args...)
}

// checkMinimumMemory refuses, before anything runs, a module whose declared
// minimum memory and tables do not fit in memMB.
func checkMinimumMemory(cm wazero.CompiledModule, parsed *wasmbin.Module, memLimit int64, memMB int64) error {
	var tableMin uint64
	for _, t := range parsed.Tables {
		tableMin += t.Min
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
		return toolerr.Limits(&toolerr.LimitsError{Limit: toolerr.LimitMemMB, Declared: memMB, Observed: ceilMB(need)},
			fmt.Sprintf("the module's declared minimum memory and tables (%s) exceed memMB %d; refused before running; raise limits.memMB in the manifest to %d or more", mb(need), memMB, ceilMB(need)))
	}
	return nil
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
