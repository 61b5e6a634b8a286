package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/extism"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/rawbuf"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// abiExtism runs unmodified Extism plug-ins (docs/extism.md): a module that
// imports from extism:host/env. Its kernel lives host-side
// (internal/extism); its host functions are Extism's config, vars, HTTP
// (through the egress engine) and logs. The entry point is the export the
// modulePath's #NAME suffix names, else handle, else the only exported
// () -> i32 / () -> () function that is not a runtime helper.
type abiExtism struct{}

func (abiExtism) name() string { return abi.ExtismModuleName }

func (abiExtism) owns(module string) bool { return module == abi.ExtismModuleName }

// Caps of the Extism host functions besides memMB.
const (
	defaultMaxVarBytes = 1 << 20 // Extism's memory.max_var_bytes default
	varEntryOverhead   = 64      // charged per var besides its key and value
)

// runtimeHelpers are exports that are never a plug-in's entry point.
var runtimeHelpers = map[string]bool{
	"_start": true, "_initialize": true, "hs_init": true, "__wasm_call_ctors": true,
	"malloc": true, "free": true, "calloc": true, "realloc": true,
}

// isRuntimeHelper reports whether an export is a guest runtime's helper or
// one the load added (every name beginning with fuel.ReservedPrefix: the
// fuel pass's start function, fuel.StartExport, and the data-init function,
// wasmbin.DataInitExport).
func isRuntimeHelper(name string) bool {
	return runtimeHelpers[name] || strings.HasPrefix(name, "asyncify_") || strings.HasPrefix(name, "__") || strings.HasPrefix(name, fuel.ReservedPrefix)
}

// isEntrySig reports whether f is callable as an Extism function: no
// parameters, no result or one i32.
func isEntrySig(f api.FunctionDefinition) bool {
	if len(f.ParamTypes()) != 0 {
		return false
	}
	r := f.ResultTypes()
	return len(r) == 0 || len(r) == 1 && r[0] == api.ValueTypeI32
}

func (abiExtism) shape(r wazero.Runtime, cm wazero.CompiledModule, parsed *wasmbin.Module, t *Tool) (moduleShape, error) {
	for _, im := range parsed.Imports {
		switch im.Module {
		case abi.ExtismModuleName, abi.WASIModuleName:
		case abi.ExtismUserModuleName:
			return moduleShape{}, shapeErr("import %s.%s: Extism host functions (%s) are not offered by sandboxd", im.Module, im.Name, im.Module)
		default:
			return moduleShape{}, shapeErr("import %s.%s: module %q is neither %s nor %s: linked multi-module plug-ins and other host-function namespaces are not supported",
				im.Module, im.Name, im.Module, abi.ExtismModuleName, abi.WASIModuleName)
		}
	}
	hosts := map[string]api.Module{abi.ExtismModuleName: r.Module(abi.ExtismModuleName), abi.WASIModuleName: r.Module(abi.WASIModuleName)}
	if err := checkImports(cm, parsed, hosts, abi.ExtismModuleName+" and "+abi.WASIModuleName); err != nil {
		return moduleShape{}, err
	}
	exports := cm.ExportedFunctions()
	entry := t.entry
	if entry == "" {
		var err error
		if entry, err = defaultExtismEntry(exports); err != nil {
			return moduleShape{}, err
		}
	}
	f, ok := exports[entry]
	if !ok {
		return moduleShape{}, shapeErr("the module exports no function %q (modulePath #%s)", entry, entry)
	}
	if !isEntrySig(f) {
		return moduleShape{}, shapeErr("export %s has signature %s, want () -> (i32) or () -> ()", entry, sigString(f))
	}
	s := moduleShape{style: Reactor, entry: entry, exitOK: true,
		stringInput: schemaIsString(t.m.Input), stringOutput: schemaIsString(t.m.Output)}
	if entry == abi.ExportStart {
		s.style = Command // a command plug-in: one run per instance (proc_exit ends it)
		return s, nil
	}
	// Guest-runtime initialisation, once per instance, as Extism's go-sdk
	// does it with WASI: Haskell's hs_init (after _initialize), else a
	// reactor's _initialize, else __wasm_call_ctors.
	noArgs := func(name string) bool {
		f, ok := exports[name]
		return ok && len(f.ParamTypes())+len(f.ResultTypes()) == 0
	}
	if hs, ok := exports["hs_init"]; ok && sameTypes(hs.ParamTypes(), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}) && len(hs.ResultTypes()) == 0 {
		if noArgs(abi.ExportInitialize) {
			s.init = append(s.init, initCall{name: abi.ExportInitialize})
		}
		s.init = append(s.init, initCall{name: "hs_init", args: []uint64{0, 0}})
	} else if noArgs(abi.ExportInitialize) {
		s.init = []initCall{{name: abi.ExportInitialize}}
	} else if noArgs("__wasm_call_ctors") {
		s.init = []initCall{{name: "__wasm_call_ctors"}}
	}
	return s, nil
}

// defaultExtismEntry applies the default-entry rule: handle if exported,
// else the only callable export that is not a runtime helper, else _start.
func defaultExtismEntry(exports map[string]api.FunctionDefinition) (string, error) {
	if f, ok := exports[abi.ExportHandle]; ok && isEntrySig(f) {
		return abi.ExportHandle, nil
	}
	var cands []string
	for name, f := range exports {
		if !isRuntimeHelper(name) && isEntrySig(f) {
			cands = append(cands, name)
		}
	}
	sort.Strings(cands)
	switch {
	case len(cands) == 1:
		return cands[0], nil
	case len(cands) > 1:
		e := shapeErr("the plug-in exports several functions (%s): name the one this tool calls with a #NAME suffix on modulePath", strings.Join(cands, ", ")).(*toolerr.Error)
		e.Details = map[string]any{"candidates": cands}
		return "", e
	}
	if _, ok := exports[abi.ExportStart]; ok {
		return abi.ExportStart, nil
	}
	return "", shapeErr("the plug-in exports no callable function (() -> i32 or () -> ()) other than runtime helpers")
}

// schemaIsString reports whether a JSON Schema says "type": "string" at its
// top level.
func schemaIsString(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	ty, ok := s.Type.(string)
	return ok && ty == "string"
}

// begin prepares an Extism call on in: an empty kernel holding the input
// (the validated JSON text, or a string input's UTF-8 bytes) and the
// instance's vars, emptied at every call unless the posture is none.
// It runs in the call's guard under ctx: unquoting a string input and
// copying the input into kernel memory are charged a chunk at a time to the
// call, on its CPU clock, and stop it within a chunk of its deadline, cpuMs
// or fuel budget.
func (abiExtism) begin(ctx context.Context, t *reactorHandler, in *instance, inv *invocation) error {
	input := inv.input
	if t.shape.stringInput {
		if s, ok := unquoteJSONString(inv.input, func() { chargeBytes(ctx, hostChunk) }); ok {
			input = s
		} else {
			var s string
			if json.Unmarshal(inv.input, &s) == nil { // not a JSON string: null at most
				input = []byte(s)
			}
		}
	}
	k := in.kernel
	if k == nil {
		k = newExtismKernel(in.acct)
		in.kernel = k
	}
	k.ctx = ctx
	defer func() { k.ctx = context.Background() }() // the kernel keeps nothing of the call's context
	k.Renew(in.acct)                                // emptied: the last call's page, kept, is cleared where it wrote
	if !k.Grow(extism.Page) || !k.SetInput(input) {
		return t.memExceeded(in.acct.Refused(), fmt.Sprintf("the Extism kernel memory for the input (%d bytes) does not fit in memMB %d", len(input), t.limits.memMB))
	}
	if in.vars == nil || t.posture != manifest.PostureNone {
		in.vars.release()
		in.vars = &varStore{acct: in.acct, max: defaultMaxVarBytes}
	}
	inv.kernel, inv.vars = k, in.vars
	return nil
}

// result maps an Extism call's end: error_set (whatever the return code) or
// a non-zero return is handler-error; otherwise the output range becomes the
// output, JSON as it is, or a JSON string when the output schema is a
// string and the bytes are not JSON (no output: null, or "" for a string).
// It runs in the call's guard under ctx: the copy out of kernel memory
// (up to memMB) is charged a chunk at a time to the call, on its CPU clock,
// and stops it within a chunk of its deadline, cpuMs or fuel budget.
func (abiExtism) result(ctx context.Context, t *reactorHandler, inv *invocation, acct *limits.Account, rc uint32) ([]byte, bool, error) {
	k := inv.kernel
	k.ctx = ctx
	defer func() { k.ctx = context.Background() }() // the kernel keeps nothing of the call's context
	reusable := acct.Refused() == 0
	if k.ErrorOff != 0 {
		msg := sanitizeLine(k.BlockBytes(k.ErrorOff, maxErrorBytes))
		if msg == "" {
			msg = fmt.Sprintf("handler returned %d", int32(rc))
		}
		return nil, reusable, &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"returned": int32(rc)}}
	}
	if rc != 0 {
		if r := acct.Refused(); r > 0 {
			return nil, false, t.memExceeded(r, fmt.Sprintf("handler failed (returned %d) after its memory use reached the memMB cap", int32(rc)))
		}
		return nil, reusable, &toolerr.Error{Code: toolerr.HandlerError, Message: fmt.Sprintf("handler returned %d", int32(rc)), Details: map[string]any{"returned": int32(rc)}}
	}
	stringOut := t.shape.stringOutput
	if k.OutputLen == 0 {
		if stringOut {
			return []byte(`""`), reusable, nil
		}
		return []byte("null"), reusable, nil
	}
	if !k.InBounds(k.OutputOff, k.OutputLen) {
		return nil, false, &toolerr.Error{Code: toolerr.HandlerTrap, Message: fmt.Sprintf("trap: the output [%d, %d) is outside kernel memory", k.OutputOff, k.OutputOff+k.OutputLen)}
	}
	if !acct.Reserve(int64(k.OutputLen)) {
		return nil, false, t.memExceeded(acct.Refused(), fmt.Sprintf("the output (%d bytes) does not fit in memMB %d", k.OutputLen, t.limits.memMB))
	}
	out := k.Read(k.OutputOff, k.OutputLen) // charged per chunk (k.charge)
	if stringOut {
		// A pass to tell JSON from text, two more to quote text, each
		// charged a chunk at a time like the copy.
		tick := func() { chargeBytes(ctx, hostChunk) }
		if !validJSON(out, tick) {
			n := jsonStringLen(out, tick)
			if !acct.Reserve(int64(n)) {
				return nil, false, t.memExceeded(acct.Refused(), fmt.Sprintf("the output as a JSON string (%d bytes) does not fit in memMB %d", n, t.limits.memMB))
			}
			out = appendJSONString(rawbuf.Uncleared(n), out, tick)
		}
	}
	return out, reusable, nil
}

// varStore is an instance's Extism vars, bounded by max bytes (keys, values
// and varEntryOverhead each) and charged to the instance's memMB account.
type varStore struct {
	acct  *limits.Account
	max   int64
	bytes int64
	m     map[string][]byte
}

func (v *varStore) release() {
	if v != nil {
		v.acct.Release(v.bytes)
		v.bytes, v.m = 0, nil
	}
}

// set stores (or with a nil value deletes) a var; it fails when the store
// would pass its bound or memMB.
func (v *varStore) set(key string, val []byte) error {
	old, had := v.m[key]
	oldSize := int64(0)
	if had {
		oldSize = int64(len(key)+len(old)) + varEntryOverhead
	}
	if val == nil {
		delete(v.m, key)
		v.acct.Release(oldSize)
		v.bytes -= oldSize
		return nil
	}
	newSize := int64(len(key)+len(val)) + varEntryOverhead
	if v.bytes-oldSize+newSize > v.max {
		return v.full()
	}
	if grow := newSize - oldSize; grow > 0 && !v.acct.Reserve(grow) {
		return fmt.Errorf("a variable of %d bytes does not fit in memMB", len(val))
	} else if grow < 0 {
		v.acct.Release(-grow)
	}
	if v.m == nil {
		v.m = map[string][]byte{}
	}
	v.m[key] = val
	v.bytes += newSize - oldSize
	return nil
}

// holds reports whether a var of a key and a value of these lengths fits in
// an empty store.
func (v *varStore) holds(keyLen, valLen uint64) bool {
	return keyLen+valLen <= uint64(v.max-varEntryOverhead)
}

func (v *varStore) full() error {
	return fmt.Errorf("the variable store is full (%d bytes at most)", v.max)
}

// varsFull is var_set's failure: handler-error, details.vars "full".
func varsFull(err error) *hostFailure {
	return &hostFailure{msg: "extism var_set: " + err.Error(), details: map[string]any{"vars": "full"}}
}

// hostFailure is the panic value of a host function whose failure fails the
// call as the handler's own (handler-error): Extism's ABI has no in-band
// error for a failed HTTP request or a full var store.
type hostFailure struct {
	msg     string
	details map[string]any
}

func (e *hostFailure) Error() string { return e.msg }

// extismKernel is a call's Extism kernel, charging its work (copies, pages
// allocated and cleared, a chunk at a time: internal/extism) to the call of
// the host function running on it, which extismCall sets.
type extismKernel struct {
	*extism.Kernel
	ctx context.Context
}

func newExtismKernel(acct *limits.Account) *extismKernel {
	k := &extismKernel{ctx: context.Background()} // charging no call until one sets ctx
	k.Kernel = extism.New(acct, k.charge)
	return k
}

// charge is the kernel's extism.Meter: chargeBytes panics, trapping the
// guest, once the call is interrupted or spent.
func (k *extismKernel) charge(n uint64) { chargeBytes(k.ctx, n) }

// extismCall returns the kernel of the call running on ctx, charging that
// call; outside a call (during initialisation) the plug-in traps.
func extismCall(ctx context.Context, fn string) (*invocation, *extismKernel) {
	inv := invocationFrom(ctx)
	if inv == nil || inv.kernel == nil {
		trapf("extism: %s called outside a call (during initialisation)", fn)
	}
	inv.kernel.ctx = ctx
	return inv, inv.kernel
}

// instantiateHost builds the extism:host/env host module. Every function is
// charged hostCallFuel and checks the interrupt (hostFunction), and pays for
// the bytes it moves; every handle is checked against kernel memory.
func (abiExtism) instantiateHost(ctx context.Context, r wazero.Runtime, t *Tool) error {
	b := r.NewHostModuleBuilder(abi.ExtismModuleName)
	vt := map[abi.ValType]api.ValueType{abi.I32: api.ValueTypeI32, abi.I64: api.ValueTypeI64}
	def := func(name string, fn func(ctx context.Context, stack []uint64)) {
		sig := abi.ExtismFunctions[name]
		params := make([]api.ValueType, len(sig.Params))
		for i, p := range sig.Params {
			params[i] = vt[p]
		}
		results := make([]api.ValueType, len(sig.Results))
		for i, p := range sig.Results {
			results[i] = vt[p]
		}
		hostFunction(b, name, params, results, func(ctx context.Context, _ api.Module, stack []uint64) { fn(ctx, stack) })
	}
	// kernel
	def("alloc", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "alloc")
		s[0] = k.Alloc(s[0]) // a header write: pages are allocated when written, cleared by reset

	})
	def("free", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "free"); k.Free(s[0]) })
	def("length", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "length"); s[0] = k.Length(s[0]) })
	def("length_unsafe", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "length_unsafe"); s[0] = k.Length(s[0]) })
	def("load_u8", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "load_u8")
		s[0] = uint64(kernelValue(k.LoadU8(s[0])))
	})
	def("load_u64", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "load_u64")
		s[0] = kernelValue(k.LoadU64(s[0]))
	})
	def("store_u8", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "store_u8")
		kernelTrap(k.StoreU8(s[0], uint8(s[1])))
	})
	def("store_u64", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "store_u64")
		kernelTrap(k.StoreU64(s[0], s[1]))
	})
	def("input_offset", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "input_offset"); s[0] = k.InputOff })
	def("input_length", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "input_length"); s[0] = k.InputLen })
	def("input_load_u8", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "input_load_u8")
		s[0] = uint64(kernelValue(k.InputU8(s[0])))
	})
	def("input_load_u64", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "input_load_u64")
		s[0] = kernelValue(k.InputU64(s[0]))
	})
	def("output_set", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "output_set")
		if !k.InBounds(s[0], s[1]) {
			trapf("extism: output_set [%d, %d) is outside kernel memory (%d bytes)", s[0], s[0]+s[1], k.Size())
		}
		k.OutputOff, k.OutputLen = s[0], s[1] // copied (and charged) when the guest returns: result
	})
	def("error_set", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "error_set")
		k.ErrorOff = s[0]
		if s[0] != 0 { // a proc_exit after error_set reports the message too (classify)
			msg := k.BlockBytes(s[0], maxErrorBytes) // charged
			inv.mu.Lock()
			inv.declared = &declaredError{Message: sanitizeLine(msg)}
			inv.mu.Unlock()
		}
	})
	def("error_get", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "error_get"); s[0] = k.ErrorOff })
	def("output_offset", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "output_offset"); s[0] = k.OutputOff })
	def("output_length", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "output_length"); s[0] = k.OutputLen })
	def("input_set", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "input_set")
		if !k.InBounds(s[0], s[1]) {
			trapf("extism: input_set [%d, %d) is outside kernel memory (%d bytes)", s[0], s[0]+s[1], k.Size())
		}
		k.InputOff, k.InputLen = s[0], s[1]
	})
	def("reset", func(ctx context.Context, s []uint64) {
		_, k := extismCall(ctx, "reset")
		k.Reset() // clears the pages written since, a page at a time, each charged first

	})
	def("memory_bytes", func(ctx context.Context, s []uint64) { _, k := extismCall(ctx, "memory_bytes"); s[0] = k.MemoryBytes() })

	// config and vars
	def("config_get", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "config_get")
		key := string(readBlock(k, s[0], maxConfigKey))
		v, errno, _ := t.config(inv, key) // declared names with a value (needs)
		if errno != 0 {
			s[0] = 0
			return
		}
		var str string
		if json.Unmarshal(v, &str) == nil {
			v = []byte(str) // strings as they are, other JSON as its text
		}
		s[0] = newBlock(k, v, "config value")
	})
	def("var_get", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "var_get")
		if !inv.vars.holds(k.Length(s[0]), 0) { // a key the store cannot hold names no var
			k.Free(s[0])
			s[0] = 0
			return
		}
		key := readBlock(k, s[0], defaultMaxVarBytes) // a copy: freeing the block leaves it intact
		k.Free(s[0])
		s[0] = newBlock(k, inv.vars.m[string(key)], "var value")
	})
	def("var_set", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "var_set")
		// A var larger than the whole store is the store's refusal (Extism:
		// "Variable store is full"), found from the lengths before anything
		// is copied; so is a key no store could hold, except for a delete.
		if kn, vn := k.Length(s[0]), k.Length(s[1]); !inv.vars.holds(kn, vn) {
			k.Free(s[0])
			k.Free(s[1])
			if s[1] == 0 {
				return // deleting a var that cannot exist
			}
			panic(varsFull(inv.vars.full()))
		}
		key := string(readBlock(k, s[0], defaultMaxVarBytes))
		var val []byte
		if s[1] != 0 {
			val = readBlock(k, s[1], defaultMaxVarBytes)
			if val == nil {
				val = []byte{}
			}
		}
		k.Free(s[0])
		k.Free(s[1])
		if err := inv.vars.set(key, val); err != nil {
			panic(varsFull(err))
		}
	})

	// HTTP through the egress engine
	def("http_request", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "http_request")
		s[0] = inv.extismHTTP(ctx, k, s[0], s[1])
	})
	def("http_status_code", func(ctx context.Context, s []uint64) {
		inv, _ := extismCall(ctx, "http_status_code")
		s[0] = uint64(uint32(inv.extismStatus))
	})
	def("http_headers", func(ctx context.Context, s []uint64) {
		inv, k := extismCall(ctx, "http_headers")
		s[0] = newBlock(k, inv.extismHeaders, "response headers")
	})

	// logs: trace and debug are sandboxd's debug
	for name, level := range map[string]int32{"log_trace": abi.LogDebug, "log_debug": abi.LogDebug, "log_info": abi.LogInfo, "log_warn": abi.LogWarn, "log_error": abi.LogError} {
		def(name, func(ctx context.Context, s []uint64) {
			inv, k := extismCall(ctx, name)
			msg := k.BlockBytes(s[0], maxLogLine) // a longer message is cut, as ABI v1's log does (charged)
			k.Free(s[0])
			if admitLog(ctx, inv, len(msg)) { // the call's log caps
				t.exec.emitLog(LogRecord{ToolID: t.ID(), Level: level, Msg: sanitizeLine(msg)})
			}
		})
	}
	def("get_log_level", func(ctx context.Context, s []uint64) { s[0] = 0 }) // every level reaches the host, which filters
	_, err := b.Instantiate(ctx)
	return err
}

// kernelTrap traps the call when a kernel access failed (an
// extism.ErrOutOfBounds error): the guest touched memory outside the
// kernel's, which Extism's ABI has no error code for.
func kernelTrap(err error) {
	if err != nil {
		trapf("%v", err)
	}
}

// kernelValue is v, or a trap of the call when err is set (kernelTrap).
func kernelValue[T any](v T, err error) T {
	kernelTrap(err)
	return v
}

// maxConfigKey caps a config_get key.
const maxConfigKey = 4 << 10

// readBlock copies at most max bytes of the block at h (charged a chunk at
// a time as it copies).
func readBlock(k *extismKernel, h, max uint64) []byte {
	n := k.Length(h)
	if n > max {
		trapf("extism: a block of %d bytes is over the %d-byte cap here", n, max)
	}
	return k.BlockBytes(h, n)
}

// newBlock puts v into a new block (0 for an empty v), charged a chunk at
// a time as it copies; a block that does not fit in memMB traps
// (limits-exceeded memMB).
func newBlock(k *extismKernel, v []byte, what string) uint64 {
	if len(v) == 0 {
		return 0
	}
	h, ok := k.NewBlock(v)
	if !ok {
		trapf("extism: the %s (%d bytes) does not fit in kernel memory within memMB", what, len(v))
	}
	return h
}

// extismHTTPRequest is http_request's request description (Extism refuses
// unknown fields).
type extismHTTPRequest struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Method  string            `json:"method"`
}

// extismHTTP performs http_request through the egress engine: the same
// policy, SSRF checks, DNS pinning, redirect re-checks, budgets and secret
// placeholders as every tool. The ABI has no in-band error, so a denied or
// failed request fails the call (handler-error, details.egress).
func (inv *invocation) extismHTTP(ctx context.Context, k *extismKernel, reqH, bodyH uint64) uint64 {
	raw := readBlock(k, reqH, maxHTTPRequestJSON)
	var body []byte
	if n := k.Length(bodyH); n > 0 {
		if !inv.acct.Reserve(int64(n)) { // the host's copy of the body, beside the kernel's
			trapf("extism http_request: the request body (%d bytes) does not fit in memMB", n)
		}
		defer inv.acct.Release(int64(n))
		body = readBlock(k, bodyH, n)
	}
	k.Free(reqH)
	k.Free(bodyH)
	var rj extismHTTPRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rj); err != nil || rj.URL == "" {
		panic(&hostFailure{msg: fmt.Sprintf("extism http_request: the request is not {\"url\", \"headers\", \"method\"}: %v", err), details: map[string]any{"egress": string(egress.ReasonInvalid)}})
	}
	method := strings.ToUpper(rj.Method)
	if method == "" {
		method = "GET"
	}
	inv.mu.Lock()
	inv.extismStatus, inv.extismHeaders = 0, nil
	inv.mu.Unlock()
	status, header, resp, err := inv.httpDo(ctx, &egress.Request{Method: method, URL: rj.URL, Header: rj.Headers, Body: body})
	st := inv.handlesFor(ctx)
	if err != nil {
		panic(inv.egressFailure(st, rj.URL, err))
	}
	defer resp.Close()
	mr := &meteredReader{ctx: ctx, r: resp}
	data, err := readCharged(mr, inv.acct, -1) // charged to memMB as it grows
	if mr.stop != nil {
		panic(mr.stop) // interrupted or spent while reading
	}
	if err != nil {
		if errors.Is(err, errMemMB) {
			trapf("extism http_request: the response body does not fit in memMB")
		}
		panic(inv.egressFailure(st, rj.URL, err))
	}
	defer inv.acct.Release(int64(cap(data)))
	hdr, _ := json.Marshal(extismHeaders(header))
	inv.mu.Lock()
	inv.extismStatus, inv.extismHeaders = int32(status), hdr
	inv.mu.Unlock()
	return newBlock(k, data, "response body")
}

// extismHeaders is http_headers' object, as go-sdk makes it: lower-case
// names, the values of a repeated header joined with "," (the declarative
// HTTP tool's egress.Response.HeadersMap joins them with ", ").
func extismHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for name, vs := range h {
		out[strings.ToLower(name)] = strings.Join(vs, ",")
	}
	return out
}

// meteredReader charges the call of ctx for every byte read from r as it
// reads, so a large response body is paid for and stops within a read of
// the call's interrupt. The stop (chargeBytes' panic) is held in stop and
// reported to the reader's caller as errStopped, so that readCharged
// releases what it reserved; the caller raises stop again.
type meteredReader struct {
	ctx  context.Context
	r    io.Reader
	stop any
}

var errStopped = errors.New("the call was stopped while the response body was read")

func (m *meteredReader) Read(p []byte) (int, error) {
	if m.stop != nil {
		return 0, errStopped
	}
	n, err := m.r.Read(p)
	if m.charge(n); m.stop != nil {
		return n, errStopped
	}
	return n, err
}

func (m *meteredReader) charge(n int) {
	defer func() { m.stop = recover() }()
	chargeBytes(m.ctx, uint64(max(n, 0)))
}

// egressFailure is the handler-error of a failed http_request, naming the
// reason, the host and the rule that matched (none for a denial).
func (inv *invocation) egressFailure(st *egressState, rawURL string, err error) *hostFailure {
	d := map[string]any{"egress": string(egress.ReasonOf(err))}
	if u, perr := url.Parse(rawURL); perr == nil && u.Hostname() != "" {
		d["host"] = u.Hostname()
	}
	if st.session == nil { // a replay (record.go): no attempts
		return &hostFailure{msg: "extism http_request failed: " + egress.MessageOf(err), details: d}
	}
	if a, _ := st.session.Attempts(); len(a) > 0 && a[len(a)-1].Rule != "" {
		d["rule"] = a[len(a)-1].Rule
	}
	return &hostFailure{msg: "extism http_request failed: " + egress.MessageOf(err), details: d}
}
