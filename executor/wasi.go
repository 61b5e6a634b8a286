package executor

import (
	"context"
	"encoding/binary"
	"io"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// Caps on WASI calls whose host work grows with a count the guest passes.
// A call over a cap traps (handler-trap) before wazero does the work.
const (
	// maxWASIIovecs is the most iovecs one fd_read/fd_write (and the
	// pread/pwrite forms) may pass: POSIX's IOV_MAX on Linux.
	maxWASIIovecs = 1024
	// maxPollSubscriptions is the most subscriptions one poll_oneoff may
	// pass (a Go guest passes one per waiting fd plus a timer).
	maxPollSubscriptions = 4096
	// WASI record sizes, for the fuel of the bytes the host reads and writes.
	wasiIovecSize        = 8
	wasiSubscriptionSize = 48
	wasiEventSize        = 32
)

// instantiateWASI instantiates wasi_snapshot_preview1 in r with a function
// listener on every WASI function (the host module only: guest code gets
// none), so that each call, like a sandboxd_v1 call (Tool.instantiateHost):
//
//   - pays hostCallFuel and checks the call's interrupt on entry (Before
//     panics to trap the guest) and checks it again before returning (After);
//   - pays for its bytes at the hostBytesPerFuel rate: fd_write the iovec bytes it is
//     given (charged before the write, in the listener, not in the writers),
//     fd_read the bytes it read, poll_oneoff its subscriptions and events,
//     random_get the bytes it generates (meteredRand: hostChunk at a time,
//     with a check between chunks, so a 4 GiB random_get is interruptible);
//   - is refused (a trap) when it passes more iovecs than maxWASIIovecs or
//     more subscriptions than maxPollSubscriptions, counts for which wazero
//     would otherwise loop uninterruptibly over guest memory.
func instantiateWASI(ctx context.Context, r wazero.Runtime) error {
	lctx := experimental.WithFunctionListenerFactory(ctx, experimental.FunctionListenerFactoryFunc(wasiListenerFor))
	_, err := wasi_snapshot_preview1.Instantiate(lctx, r)
	return err
}

// wasiListener meters one WASI function. before and after (nil: nothing
// more than the call's fixed fuel and the interrupt checks) charge for the
// function's work from its parameters and guest memory.
type wasiListener struct {
	before func(ctx context.Context, mod api.Module, params []uint64)
	after  func(ctx context.Context, mod api.Module, stack []uint64)
}

func wasiListenerFor(def api.FunctionDefinition) experimental.FunctionListener {
	l := &wasiListener{}
	switch def.Name() {
	case "fd_write", "fd_pwrite":
		l.before = func(ctx context.Context, mod api.Module, params []uint64) {
			chargeBytes(ctx, iovecBytes(mod, def.Name(), params))
		}
	case "fd_read", "fd_pread":
		// The bytes read are known only after the call: wazero writes the
		// count to the result pointer, the last parameter (a WASI function
		// writes only its errno to the stack, so the parameters are still
		// there in After).
		resultParam := 3
		if def.Name() == "fd_pread" {
			resultParam = 4
		}
		l.before = func(ctx context.Context, mod api.Module, params []uint64) {
			if n := uint32(params[2]); n > maxWASIIovecs {
				trapf("%s with %d iovecs is over the cap of %d", def.Name(), n, maxWASIIovecs)
			}
		}
		l.after = func(ctx context.Context, mod api.Module, stack []uint64) {
			if len(stack) <= resultParam || uint32(stack[0]) != 0 || mod.Memory() == nil {
				return
			}
			if n, ok := mod.Memory().ReadUint32Le(uint32(stack[resultParam])); ok {
				chargeBytes(ctx, uint64(n))
			}
		}
	case "poll_oneoff":
		l.before = func(ctx context.Context, mod api.Module, params []uint64) {
			n := uint32(params[2])
			if n > maxPollSubscriptions {
				trapf("poll_oneoff with %d subscriptions is over the cap of %d", n, maxPollSubscriptions)
			}
			chargeBytes(ctx, uint64(n)*(wasiSubscriptionSize+wasiEventSize))
		}
	}
	if !fuel.StatelessWASI(def.Name()) {
		l.after = watchHostState(def.Name(), l.after)
	}
	return l
}

// iovecBytes returns the bytes the iovecs of an fd_write/fd_pwrite call
// (params: fd, iovs, iovs_len, ...) describe, trapping past maxWASIIovecs.
// Iovecs outside guest memory count nothing: wazero answers EFAULT.
func iovecBytes(mod api.Module, name string, params []uint64) uint64 {
	iovs, n := uint32(params[1]), uint32(params[2])
	if n > maxWASIIovecs {
		trapf("%s with %d iovecs is over the cap of %d", name, n, maxWASIIovecs)
	}
	mem := mod.Memory()
	if mem == nil {
		return 0
	}
	b, ok := mem.Read(iovs, n*wasiIovecSize)
	if !ok {
		return 0
	}
	total := uint64(n) * wasiIovecSize
	for i := uint32(0); i < n; i++ {
		total += uint64(binary.LittleEndian.Uint32(b[i*wasiIovecSize+4:]))
	}
	return total
}

// Before implements experimental.FunctionListener: the call's fixed fuel
// and the interrupt check on entry, then the function's own charge.
func (l *wasiListener) Before(ctx context.Context, mod api.Module, _ api.FunctionDefinition, params []uint64, _ experimental.StackIterator) {
	fuel.Charge(ctx, hostCallFuel)
	if l.before != nil {
		l.before(ctx, mod, params)
	}
}

// After implements experimental.FunctionListener: the function's charge for
// what it did, then the interrupt check before returning to the guest.
func (l *wasiListener) After(ctx context.Context, mod api.Module, _ api.FunctionDefinition, stack []uint64) {
	if l.after != nil {
		l.after(ctx, mod, stack)
	}
	fuel.Check(ctx)
}

// Abort implements experimental.FunctionListener: a call that trapped or
// exited has nothing more to charge.
func (*wasiListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// meteredRand is an instance's random source for WASI random_get: it hands
// out at most hostChunk bytes per Read (io.ReadAtLeast in wazero's
// random_get calls it again for the rest) and charges each chunk to the
// instance's current call (sleeper.ctx), so a large random_get pays for its
// bytes and stops within a chunk of an interrupt.
type meteredRand struct {
	src io.Reader
	sl  *sleeper
}

func (r *meteredRand) Read(p []byte) (int, error) {
	ctx := context.Background()
	if c := r.sl.ctx.Load(); c != nil {
		ctx = *c
	}
	p = p[:min(len(p), hostChunk)]
	chargeBytes(ctx, uint64(len(p)))
	return r.src.Read(p)
}

// rand returns src metered for the instance of s (see meteredRand).
func (s *sleeper) rand(src io.Reader) io.Reader { return &meteredRand{src: src, sl: s} }
