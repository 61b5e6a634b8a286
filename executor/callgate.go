package executor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errToolClosing is the cause a call's context carries when the tool was
// closed under it.
var errToolClosing = errors.New("the tool was closed during the call")

// callGate counts a tool's running calls so that Close can stop them and
// wait for them before it closes the runtime. Closing the runtime frees
// each instance's linear memory (limits.linearMemory unmaps it) and the
// compiled code: a guest still running on another goroutine then faults on
// its next memory access, and a fault in guest code (or in the runtime's
// memmove that memory.copy calls) is a fatal error of the whole process,
// which no recover catches ("unexpected fault address", then "unsafe.Slice:
// len out of range" from the runtime's traceback of the guest stack).
//
// Every call enters and leaves it, so it takes no lock all calls share: a
// call counts itself (running +1) before it checks closing and shut sets
// closing before it reads running (sequentially consistent atomics: either
// shut waits for the call or the call sees the shut), and a call's context
// is hooked to one of gateShards stop contexts in turn, so the calls do not
// all queue on one context's mutex (context.AfterFunc locks it on hook and
// unhook).
type callGate struct {
	running atomic.Int64
	closing atomic.Bool
	next    atomic.Uint32 // the shard of the next call

	once    sync.Once
	stops   [gateShards]context.Context // done once closing
	cancels [gateShards]context.CancelFunc
	wake    chan struct{} // leave's signal to shut's waiter (capacity 1)
}

// gateShards is how many stop contexts a gate spreads its calls over.
const gateShards = 16

func (g *callGate) init() {
	g.once.Do(func() {
		for i := range g.stops {
			g.stops[i], g.cancels[i] = context.WithCancel(context.Background())
		}
		g.wake = make(chan struct{}, 1)
	})
}

// enter registers a call and returns ctx, canceled when the tool closes;
// false once shut began. The caller must call the returned leave.
func (g *callGate) enter(ctx context.Context) (context.Context, func(), bool) {
	g.running.Add(1)
	if g.closing.Load() {
		g.leave()
		return ctx, nil, false
	}
	g.init()
	stop := g.stops[g.next.Add(1)%gateShards]
	ctx, cancel := context.WithCancelCause(ctx)
	// A stop already done (shut ran since the check above) runs the hook
	// at once: the call is cancelled, and shut waits for it to leave.
	unhook := context.AfterFunc(stop, func() { cancel(errToolClosing) })
	return ctx, func() { unhook(); cancel(nil); g.leave() }, true
}

func (g *callGate) leave() {
	if g.running.Add(-1) == 0 && g.closing.Load() {
		g.init()
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// shut refuses new calls, cancels the running ones and returns a channel
// closed once none runs.
func (g *callGate) shut() <-chan struct{} {
	g.init()
	g.closing.Store(true)
	for _, cancel := range g.cancels {
		cancel()
	}
	idle := make(chan struct{})
	go func() {
		for g.running.Load() > 0 {
			<-g.wake
		}
		close(idle)
	}()
	return idle
}
