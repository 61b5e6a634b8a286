package executor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
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
// shut waits for the call or the call sees the shut). A running call sees
// closing at its context's next Err (callCtx: the fuel meter reads it at
// every refill, fuel.Check at every host call); a call that waits on its
// context (Done, AfterFunc) is hooked onto one of gateShards stop
// contexts, which shut cancels, so the calls do not all queue on one
// context's mutex (context.AfterFunc locks it on hook and unhook).
type callGate struct {
	// running is written twice by every call: it has a cache line of its
	// own, so the fields around it (the Tool's, read by every call, and
	// closing, read at every host call) are not invalidated with it.
	_       [64]byte
	running atomic.Int64
	_       [56]byte
	closing atomic.Bool
	next    atomic.Uint32 // the shard of the next call that waits on its context

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

// enter registers a call and returns its context (a callCtx): ended when
// ctx ends, when the tool closes, and timeout after now when ctx has no
// deadline (0: no default timeout); false once shut began. The caller must
// call the context's release when the call ends.
func (g *callGate) enter(ctx context.Context, timeout time.Duration, deadline time.Time) (*callCtx, bool) {
	g.running.Add(1)
	if g.closing.Load() {
		g.leave()
		return nil, false
	}
	g.init()
	return newCallCtx(ctx, g, timeout, deadline), true
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
