package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
)

// Fuel for host work. Every host function (sandboxd_v1 here, WASI in
// instantiateWASI) spends hostCallFuel units per call, plus one unit per
// hostBytesPerFuel bytes it copies from or to guest memory, generates or
// writes — so a loop of host calls pays for the work it makes the host do,
// as a loop of instructions does (a unit is about one instruction). It
// checks the call's interrupt (fuel.Check) on entry, between chunks of at
// most hostChunk bytes, and before it returns: an interrupted or spent call
// traps at its next host boundary, and no host copy runs for more than a
// chunk's time without a check.
const (
	hostCallFuel     = 32
	hostBytesPerFuel = 16
	hostChunk        = 64 << 10 // as the pass's fuel.BulkChunkBytes
)

// bytesFuel is the fuel charged for moving n bytes.
func bytesFuel(n uint64) int64 { return int64((n + hostBytesPerFuel - 1) / hostBytesPerFuel) }

// chargeBytes charges the call of ctx for moving n bytes (fuel.Charge: it
// panics, trapping the guest, when the call is interrupted or its budget is
// spent; it does nothing for an unmetered call).
func chargeBytes(ctx context.Context, n uint64) {
	if n > 0 {
		fuel.Charge(ctx, bytesFuel(n))
	}
}

// hostTrap is the panic value of a host function that refuses a call
// outright (the call traps with handler-trap and this message).
type hostTrap struct{ msg string }

func (e *hostTrap) Error() string { return e.msg }

// trapf makes the calling guest trap with a handler-trap error.
func trapf(format string, args ...any) {
	panic(&hostTrap{fmt.Sprintf(format, args...)})
}

// Caps on guest-declared data held by the host.
const (
	maxErrorBytes   = 64 << 10
	maxLogLine      = 64 << 10
	maxLogLines     = 1000
	maxLogBytes     = 1 << 20
	maxForwardBytes = 1 << 20 // guest stdout/stderr forwarded per invocation
	stderrTail      = 4 << 10
)

// invocation is the host-side state of one call, reachable from host
// functions through the call's context.
type invocation struct {
	tool    *Tool
	input   []byte
	cc      CallContext       // the caller's context (contextDoc)
	env     map[string]string // the declared env values of the call
	acct    *limits.Account
	secrets map[string]string
	config  map[string][]byte
	trace   Tracer // the call's tracer (trace.go); nil when none
	tape    tape   // a recorded or replayed call's host answers (record.go); nil when neither
	// The outcome a reactor's run returns (a pointer to it): one
	// allocation less per call than a runOutcome of its own.
	outcome runOutcome

	mu        sync.Mutex
	context   []byte // the context document, once contextDoc made it
	output    []byte
	outputSet bool
	// outputUnset: handle returned 0 without output_set (abiV1.result).
	outputUnset bool
	declared    *declaredError
	lastErr     string
	logLines    int
	logBytes    int
	logDrops    int
	egress      *egressState // the HTTP import's state, from the first http_request

	// Extism plug-ins (abiExtism): the call's kernel, the instance's vars,
	// the last http_request's status and headers.
	kernel        *extismKernel
	vars          *varStore
	extismStatus  int32
	extismHeaders []byte
}

// declaredError is what a guest passed to error_set.
type declaredError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
}

type invocationKey struct{}

func invocationFrom(ctx context.Context) *invocation {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	return inv
}

// contextDoc returns the call's context document (contextJSON), made on
// first use.
func (inv *invocation) contextDoc() []byte {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.context == nil {
		inv.context = contextJSON(&inv.cc, inv.env)
	}
	return inv.context
}

// fail records msg as the last error and returns errno.
func (inv *invocation) fail(errno abi.Errno, format string, args ...any) int32 {
	inv.mu.Lock()
	inv.lastErr = fmt.Sprintf(format, args...)
	inv.mu.Unlock()
	return int32(errno)
}

// readGuest copies a guest memory range. ok is false when it is out of bounds.
func readGuest(mod api.Module, ptr, n uint32) ([]byte, bool) {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

// viewGuest returns a guest memory range without copying; valid only until
// the guest runs again.
func viewGuest(mod api.Module, ptr, n uint32) ([]byte, bool) {
	if mod.Memory() == nil {
		return nil, false
	}
	return mod.Memory().Read(ptr, n)
}

// copyOut implements the size/copy convention: it copies min(n, len(v))
// bytes of v to ptr and returns len(v). It charges nothing (see copyOutFuel).
func (inv *invocation) copyOut(mod api.Module, v []byte, ptr, n uint32) int32 {
	return inv.copyOutFuel(context.Background(), mod, v, ptr, n)
}

// copyOutFuel is copyOut charging the call of ctx for the bytes copied, a
// hostChunk at a time.
func (inv *invocation) copyOutFuel(ctx context.Context, mod api.Module, v []byte, ptr, n uint32) int32 {
	c := min(uint32(len(v)), n)
	if c > 0 || n > 0 {
		mem := mod.Memory()
		if mem == nil {
			return inv.fail(abi.ErrOutOfBounds, "the module has no memory")
		}
		if _, ok := mem.Read(ptr, n); !ok {
			return inv.fail(abi.ErrOutOfBounds, "buffer [%d, %d) is outside guest memory", ptr, uint64(ptr)+uint64(n))
		}
		for off := uint32(0); off < c; {
			k := min(c-off, hostChunk)
			chargeBytes(ctx, uint64(k))
			mem.Write(ptr+off, v[off:off+k])
			off += k
		}
	}
	return int32(len(v))
}

func noInvocation(stack []uint64) {
	stack[0] = api.EncodeI32(int32(abi.ErrNoInvocation))
}

// instantiateHost builds the sandboxd_v1 host module for one tool's runtime.
func (t *Tool) instantiateHost(ctx context.Context, r wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := r.NewHostModuleBuilder(abi.ModuleName)
	def := func(name string, fn api.GoModuleFunc) {
		sig := abi.Functions[name]
		params := make([]api.ValueType, len(sig.Params))
		for i, p := range sig.Params {
			params[i] = map[abi.ValType]api.ValueType{abi.I32: i32, abi.I64: i64}[p]
		}
		results := make([]api.ValueType, len(sig.Results))
		for i, p := range sig.Results {
			results[i] = map[abi.ValType]api.ValueType{abi.I32: i32, abi.I64: i64}[p]
		}
		hostFunction(b, name, params, results, fn) // charged and interruptible
	}
	readValue := func(get func(inv *invocation) []byte) api.GoModuleFunc {
		return func(ctx context.Context, mod api.Module, stack []uint64) {
			inv := invocationFrom(ctx)
			if inv == nil {
				noInvocation(stack)
				return
			}
			stack[0] = api.EncodeI32(inv.copyOutFuel(ctx, mod, get(inv), api.DecodeU32(stack[0]), api.DecodeU32(stack[1])))
		}
	}
	def(abi.FnInputRead, readValue(func(inv *invocation) []byte { return inv.input }))
	def(abi.FnContextRead, readValue((*invocation).contextDoc))
	def(abi.FnOutputSet, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
		v, ok := viewGuest(mod, ptr, n)
		if !ok {
			stack[0] = api.EncodeI32(inv.fail(abi.ErrOutOfBounds, "output [%d, %d) is outside guest memory", ptr, uint64(ptr)+uint64(n)))
			return
		}
		inv.mu.Lock()
		old := int64(len(inv.output))
		inv.mu.Unlock()
		// The new output replaces the old one: reserve the growth only.
		if grow := int64(n) - old; grow > 0 && !inv.acct.Reserve(grow) {
			stack[0] = api.EncodeI32(inv.fail(abi.ErrMemoryBudget, "an output of %d bytes does not fit in memMB %d with the guest's memory", n, inv.tool.limits.memMB))
			return
		} else if grow < 0 {
			inv.acct.Release(-grow)
		}
		inv.mu.Lock()
		buf := inv.output[:0]
		inv.mu.Unlock()
		if uint32(cap(buf)) < n {
			buf = make([]byte, 0, n)
		}
		for off := uint32(0); off < n; {
			k := min(n-off, hostChunk)
			chargeBytes(ctx, uint64(k))
			buf = append(buf, v[off:off+k]...)
			off += k
		}
		inv.mu.Lock()
		inv.output = buf
		inv.outputSet = true
		inv.mu.Unlock()
		stack[0] = 0
	})
	def(abi.FnErrorSet, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
		if n > maxErrorBytes {
			stack[0] = api.EncodeI32(inv.fail(abi.ErrTooLarge, "error of %d bytes is over the %d-byte cap", n, maxErrorBytes))
			return
		}
		v, ok := readGuest(mod, ptr, n)
		if !ok {
			stack[0] = api.EncodeI32(inv.fail(abi.ErrOutOfBounds, "error [%d, %d) is outside guest memory", ptr, uint64(ptr)+uint64(n)))
			return
		}
		chargeBytes(ctx, uint64(n))
		inv.mu.Lock()
		inv.declared = parseDeclaredError(v)
		inv.mu.Unlock()
		stack[0] = 0
	})
	def(abi.FnLog, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		level := api.DecodeI32(stack[0])
		ptr, n := api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
		msg, ok := viewGuest(mod, ptr, min(n, maxLogLine))
		if !ok {
			if inv != nil {
				inv.fail(abi.ErrOutOfBounds, "log line outside guest memory")
			}
			return
		}
		chargeBytes(ctx, uint64(len(msg)))
		if !admitLog(ctx, inv, len(msg)) { // a call's caps, also during initialisation (F07)
			return
		}
		level = min(max(level, abi.LogDebug), abi.LogError)
		t.exec.emitLog(LogRecord{ToolID: t.ID(), Level: level, Msg: sanitizeLine(msg)})
	})
	def(abi.FnHTTPRequest, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			stack[0] = api.EncodeI64(int64(abi.ErrNoInvocation))
			return
		}
		reqPtr, reqLen, bodyPtr, bodyLen := api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2]), api.DecodeU32(stack[3])
		// Charged for the copies httpRequest makes of the description and the
		// body (before it makes them).
		if _, ok := viewGuest(mod, reqPtr, reqLen); ok && reqLen <= maxHTTPRequestJSON {
			chargeBytes(ctx, uint64(reqLen))
		}
		if _, ok := viewGuest(mod, bodyPtr, bodyLen); ok {
			chargeBytes(ctx, uint64(bodyLen))
		}
		stack[0] = api.EncodeI64(inv.httpRequest(ctx, mod, reqPtr, reqLen, bodyPtr, bodyLen))
	})
	def(abi.FnHTTPStatus, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		stack[0] = api.EncodeI32(inv.httpStatus(api.DecodeI32(stack[0])))
	})
	def(abi.FnHTTPHeaders, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		n := api.DecodeU32(stack[2])
		size := inv.httpHeaders(mod, api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), n)
		if size > 0 {
			chargeBytes(ctx, uint64(min(uint32(size), n)))
		}
		stack[0] = api.EncodeI32(size)
	})
	def(abi.FnHTTPBodyRead, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		k := inv.httpBodyRead(mod, api.DecodeI32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		if k > 0 {
			chargeBytes(ctx, uint64(k))
		}
		stack[0] = api.EncodeI32(k)
	})
	def(abi.FnHTTPClose, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			noInvocation(stack)
			return
		}
		stack[0] = api.EncodeI32(inv.httpClose(api.DecodeI32(stack[0])))
	})
	named := func(lookup func(inv *invocation, name string) ([]byte, abi.Errno, string)) api.GoModuleFunc {
		return func(ctx context.Context, mod api.Module, stack []uint64) {
			inv := invocationFrom(ctx)
			if inv == nil {
				noInvocation(stack)
				return
			}
			nptr, nlen := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
			name, ok := viewGuest(mod, nptr, nlen)
			if !ok {
				stack[0] = api.EncodeI32(inv.fail(abi.ErrOutOfBounds, "name outside guest memory"))
				return
			}
			chargeBytes(ctx, uint64(nlen))
			v, errno, msg := lookup(inv, string(name))
			if errno != 0 {
				stack[0] = api.EncodeI32(inv.fail(errno, "%s", msg))
				return
			}
			stack[0] = api.EncodeI32(inv.copyOutFuel(ctx, mod, v, api.DecodeU32(stack[2]), api.DecodeU32(stack[3])))
		}
	}
	def(abi.FnSecretGet, named(func(inv *invocation, name string) ([]byte, abi.Errno, string) {
		return inv.secretGet(name)
	}))
	def(abi.FnConfigGet, named(func(inv *invocation, name string) ([]byte, abi.Errno, string) {
		return inv.tool.config(inv, name)
	}))
	def(abi.FnLastErrorRead, func(ctx context.Context, mod api.Module, stack []uint64) {
		inv := invocationFrom(ctx)
		if inv == nil {
			stack[0] = 0
			return
		}
		inv.mu.Lock()
		msg := inv.lastErr
		inv.mu.Unlock()
		stack[0] = api.EncodeI32(inv.copyOutFuel(ctx, mod, []byte(msg), api.DecodeU32(stack[0]), api.DecodeU32(stack[1])))
	})
	_, err := b.Instantiate(ctx)
	return err
}

// parseDeclaredError reads error_set's argument: the JSON object form, or
// plain text used as the message.
func parseDeclaredError(v []byte) *declaredError {
	var d declaredError
	if json.Unmarshal(v, &d) == nil && (d.Code != "" || d.Message != "") {
		d.Message = sanitizeLine([]byte(d.Message))
		return &d
	}
	return &declaredError{Message: sanitizeLine(v)}
}
