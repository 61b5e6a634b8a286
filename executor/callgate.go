package executor

import (
	"context"
	"errors"
	"sync"
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
type callGate struct {
	mu      sync.Mutex
	running int
	closing bool
	stop    context.Context // done once closing; made by the first call
	cancel  context.CancelFunc
	idle    chan struct{} // closed when running drops to 0 after shut
}

// enter registers a call and returns ctx, canceled when the tool closes;
// false once shut began. The caller must call leave and then the returned
// release.
func (g *callGate) enter(ctx context.Context) (context.Context, func(), bool) {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return ctx, nil, false
	}
	if g.stop == nil {
		g.stop, g.cancel = context.WithCancel(context.Background())
	}
	stop := g.stop
	g.running++
	g.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(stop, func() { cancel(errToolClosing) })
	return ctx, func() { unhook(); cancel(nil); g.leave() }, true
}

func (g *callGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.running == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// shut refuses new calls, cancels the running ones and returns a channel
// closed once none runs.
func (g *callGate) shut() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	if g.cancel != nil {
		g.cancel()
	}
	idle := make(chan struct{})
	if g.running == 0 {
		close(idle)
	} else {
		g.idle = idle
	}
	return idle
}
