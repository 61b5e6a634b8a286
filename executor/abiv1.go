package executor

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/limits"
)

// abiV1 is sandboxd's own guest ABI (package abi): imports from sandboxd_v1
// and WASI; a reactor exports handle () -> i32 (and optionally
// _initialize), a command exports _start. Its host module is built by
// Tool.instantiateHost (its HTTP import calls invocation.httpRequest and
// the other http_* methods).
type abiV1 struct{}

func (abiV1) name() string { return abi.ModuleName }

func (abiV1) owns(module string) bool { return module == abi.ModuleName }

func (abiV1) instantiateHost(ctx context.Context, r wazero.Runtime, t *Tool) error {
	return t.instantiateHost(ctx, r)
}

// shape verifies the compiled module against ABI v1: every import comes
// from sandboxd_v1 or wasi_snapshot_preview1 and exists there with the same
// signature, and the entry points are well-formed.
func (abiV1) shape(r wazero.Runtime, cm wazero.CompiledModule, parsed *wasmbin.Module, t *Tool) (moduleShape, error) {
	if t.entry != "" && t.entry != abi.ExportHandle {
		return moduleShape{}, shapeErr("modulePath #%s: an entry suffix names an Extism plug-in's export; an ABI v1 handler enters at %s or %s", t.entry, abi.ExportHandle, abi.ExportStart)
	}
	hosts := map[string]api.Module{abi.ModuleName: r.Module(abi.ModuleName), abi.WASIModuleName: r.Module(abi.WASIModuleName)}
	if err := checkImports(cm, parsed, hosts, abi.ModuleName+" and "+abi.WASIModuleName); err != nil {
		return moduleShape{}, err
	}
	exports := cm.ExportedFunctions()
	start, hasStart := exports[abi.ExportStart]
	handle, hasHandle := exports[abi.ExportHandle]
	initFn, hasInit := exports[abi.ExportInitialize]
	switch {
	case hasStart:
		if hasInit {
			return moduleShape{}, shapeErr("module exports both %s and %s; a handler is a command or a reactor, not both", abi.ExportStart, abi.ExportInitialize)
		}
		if len(start.ParamTypes())+len(start.ResultTypes()) != 0 {
			return moduleShape{}, shapeErr("export %s has signature %s, want () -> ()", abi.ExportStart, sigString(start))
		}
		return moduleShape{style: Command}, nil
	case hasHandle:
		if len(handle.ParamTypes()) != 0 || !sameTypes(handle.ResultTypes(), []api.ValueType{api.ValueTypeI32}) {
			return moduleShape{}, shapeErr("export %s has signature %s, want () -> (i32)", abi.ExportHandle, sigString(handle))
		}
		if hasInit && len(initFn.ParamTypes())+len(initFn.ResultTypes()) != 0 {
			return moduleShape{}, shapeErr("export %s has signature %s, want () -> ()", abi.ExportInitialize, sigString(initFn))
		}
		if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
			return moduleShape{}, shapeErr("reactor does not export its memory as %q", abi.ExportMemory)
		}
		s := moduleShape{style: Reactor, entry: abi.ExportHandle}
		if hasInit {
			s.init = []initCall{{name: abi.ExportInitialize}}
		}
		return s, nil
	}
	return moduleShape{}, shapeErr("module exports no entry point: a handler exports %s (command) or %s (reactor)", abi.ExportStart, abi.ExportHandle)
}

// result maps handle's return: 0 is success with the output set by
// output_set (null when none was), anything else a handler failure with
// what error_set declared.
func (abiV1) result(_ context.Context, t *reactorHandler, inv *invocation, acct *limits.Account, rc uint32) ([]byte, bool, error) {
	if rc != 0 {
		return nil, acct.Refused() == 0, t.handlerFailure(inv, acct, int32(rc))
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.outputSet {
		inv.outputUnset = true // named if null fails the output schema
		return []byte("null"), true, nil
	}
	return inv.output, true, nil
}

func (abiV1) begin(context.Context, *reactorHandler, *instance, *invocation) error { return nil }

// errnoOf maps an egress failure to the ABI v1 error number its host
// import returns.
func errnoOf(err error) abi.Errno {
	switch egress.ReasonOf(err) {
	case egress.ReasonDenied:
		return abi.ErrDenied
	case egress.ReasonNotFound:
		return abi.ErrNotFound
	case egress.ReasonInvalid:
		return abi.ErrInvalid
	case egress.ReasonBadHandle:
		return abi.ErrBadHandle
	case egress.ReasonTimeout:
		return abi.ErrTimeout
	case egress.ReasonRequestBudget:
		return abi.ErrRequestBudget
	case egress.ReasonBodyBudget:
		return abi.ErrBodyBudget
	case egress.ReasonHeaderBudget:
		return abi.ErrHeaderBudget
	case egress.ReasonConnBudget:
		return abi.ErrConnBudget
	case egress.ReasonRedirect:
		return abi.ErrRedirect
	case egress.ReasonMemoryBudget:
		return abi.ErrMemoryBudget
	case egress.ReasonInternal:
		return abi.ErrInternal
	}
	return abi.ErrUnavailable
}
