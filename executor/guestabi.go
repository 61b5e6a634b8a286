package executor

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/limits"
)

// guestABI is one host↔guest ABI a module may speak: the import modules it
// owns, how its host module is built, how a module's shape (entry, style) is
// recognised, and how a finished call's result is read. ABI v1
// (sandboxd_v1, abiV1) is the first implementation.
type guestABI interface {
	// name is the ABI's host module name, for messages.
	name() string
	// owns reports whether importing from module makes a module speak this
	// ABI.
	owns(module string) bool
	// instantiateHost builds the ABI's host module in r for t's calls.
	instantiateHost(ctx context.Context, r wazero.Runtime, t *Tool) error
	// shape checks the module's imports and exports against the ABI and
	// recognises its style and entry point; failures are
	// handler-shape-invalid.
	shape(r wazero.Runtime, cm wazero.CompiledModule, parsed *wasmbin.Module, t *Tool) (moduleShape, error)
	// result reads a reactor call's output or failure once its entry
	// returned rc without trapping. reusable says whether the instance may
	// serve another call. It runs inside the call's guard, under the
	// call's context ctx (the metered one): work it does in proportion to
	// the output (Extism's copy out of kernel memory) is the call's, on
	// its CPU clock and charged a chunk at a time, and it may stop the
	// call as a host function does (a fuel or trap panic: resultStopped).
	result(ctx context.Context, t *reactorHandler, inv *invocation, acct *limits.Account, rc uint32) (output []byte, reusable bool, err error)
	// begin prepares a reactor call on in before its entry runs (the
	// call's ABI state in inv); an error fails the call. It runs inside the
	// call's guard under ctx, as result does: work in proportion to the
	// input (Extism's unquoting and copy into kernel memory) is the
	// call's, charged a chunk at a time, and may stop it the same way.
	begin(ctx context.Context, t *reactorHandler, in *instance, inv *invocation) error
}

// moduleShape is what a guest ABI recognised in a module.
type moduleShape struct {
	style Style
	entry string     // the export a reactor call runs ("" for a command)
	init  []initCall // what runs once per instance before its first call
	// exitOK makes proc_exit(0) during a call a success (Extism).
	exitOK bool
	// stringInput and stringOutput: the tool's input or output schema is
	// "type": "string", so the guest gets and gives bytes (Extism).
	stringInput, stringOutput bool
}

// initCall is one guest-runtime initialisation export and its arguments.
type initCall struct {
	name string
	args []uint64
}

// abis are the guest ABIs in the order a module's imports are matched; the
// last is the default for a module that imports from none of them.
var abis = []guestABI{abiExtism{}, abiV1{}}

// selectABI returns the ABI whose import module the module uses (nil
// parsed: the default). A module that imports from none of them (pure
// compute, WASI at most) is an Extism plug-in when the modulePath names an
// entry other than ABI v1's handle with #NAME (Extism calls any export; ABI
// v1 would refuse the suffix), else an ABI v1 handler.
func selectABI(parsed *wasmbin.Module, entry string) guestABI {
	if parsed != nil {
		for _, ga := range abis {
			for _, im := range parsed.Imports {
				if ga.owns(im.Module) {
					return ga
				}
			}
		}
	}
	if parsed != nil && entry != "" && entry != abi.ExportHandle {
		return abiExtism{}
	}
	return abis[len(abis)-1]
}

// hostFunction builds every host function the same way: it pays
// hostCallFuel and checks the call's interrupt on entry (fuel.Charge) and
// checks it again before returning (fuel.Check), whichever ABI it serves.
func hostFunction(b wazero.HostModuleBuilder, name string, params, results []api.ValueType, fn api.GoModuleFunc) {
	metered := func(ctx context.Context, mod api.Module, stack []uint64) {
		m := fuel.Enter(ctx, hostCallFuel) // one lookup of the meter for both
		fn(ctx, mod, stack)
		if m != nil {
			m.Check(ctx)
		}
	}
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(metered), params, results).Export(name)
}
