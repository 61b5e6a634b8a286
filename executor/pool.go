package executor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/manifest"
)

// initialPoolTarget is the target a new pool starts at (at most its size).
const initialPoolTarget = 2

// pool keeps pre-instantiated, never-used reactor instances for a
// context-isolated or strict tool, so a call takes a fresh instance without
// paying for instantiation and _initialize. A background goroutine refills it
// after every take. Instances are created without any call's data (no input,
// no env), so nothing of one call can reach another.
//
// The pool adapts to load: it starts at a target of min(2, size), a call that
// finds it empty raises the target by one (up to size), and a pool nobody took
// from for the idle period lowers it by one (down to 1) and closes the
// surplus. Every tool's pooled instances together stay within the executor's
// pool memory budget; a refill that would pass it waits for the next take.
type pool struct {
	ready   chan *instance // capacity = the size cap
	retired chan *instance // used instances for the refill goroutine to close
	need    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
	// halt is cancelled with stop: it bounds the refill's instantiations,
	// so a pooled instance's _initialize still running when the tool
	// closes is stopped rather than left to run while the runtime (and its
	// linear memory) is closed under it (callGate).
	halt     context.Context
	haltStop context.CancelFunc
	target   atomic.Int32 // instances to keep ready now, 1..cap(ready)
	out      atomic.Int32 // recyclable instances serving a call: they come back through retired
	recycled atomic.Int64 // calls served by a recycled instance
	lastTake atomic.Int64 // unix nanoseconds of the last take
}

func (t *reactorHandler) poolable() bool {
	return (t.posture == manifest.PostureContextIsolated || t.posture == manifest.PostureStrict) &&
		len(t.needs.env) == 0
}

func (t *reactorHandler) startPool() {
	size := t.cfg.poolSize
	if size == 0 || !t.poolable() {
		return
	}
	p := &pool{ready: make(chan *instance, size), retired: make(chan *instance, retireQueue), need: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.halt, p.haltStop = context.WithCancel(context.Background())
	p.target.Store(int32(min(initialPoolTarget, size)))
	p.lastTake.Store(time.Now().UnixNano())
	t.pool = p
	go t.refill(p)
	p.need <- struct{}{}
}

// refill tops the pool up whenever a call took an instance. A failure to
// instantiate stops refilling until the next take, so a module whose
// _initialize fails costs its callers, not a spinning background loop.
func (t *reactorHandler) refill(p *pool) {
	defer close(p.done)
	budget, idle := t.cfg.poolLimits()
	tick := time.NewTicker(max(idle/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case in := <-p.retired:
			if !t.recycle(p, in, budget) {
				continue
			}
			// recycling failed: an instance to replace
		case <-tick.C:
			t.shrinkIdle(p, idle)
			continue
		case <-p.need:
		}
		for len(p.ready)+int(p.out.Load()) < int(p.target.Load()) {
			if t.pooled.Load() >= budget {
				break // over the shared budget: wait for a take
			}
			ctx, cancel := context.WithTimeout(p.halt, t.cfg.defaultTimeout)
			in, err := t.newInstance(ctx, nil, newLineForwarder(t.cfg.guestStdout, t.id, "stdout"), newLineForwarder(t.cfg.guestStderr, t.id, "stderr"))
			cancel()
			if err != nil {
				break
			}
			size := in.heldBytes()
			if t.pooled.Add(size) > budget {
				t.pooled.Add(-size)
				_ = in.mod.Close(context.Background())
				break
			}
			select {
			case p.ready <- in:
			case <-p.stop:
				t.pooled.Add(-size)
				_ = in.mod.Close(context.Background())
				return
			}
		}
	}
}

// shrinkIdle lowers the target of a pool nobody took from for idle, and
// closes the ready instances above it.
func (t *reactorHandler) shrinkIdle(p *pool, idle time.Duration) {
	if time.Since(time.Unix(0, p.lastTake.Load())) < idle {
		return
	}
	if tg := p.target.Load(); tg > 1 {
		p.target.Store(tg - 1)
		p.lastTake.Store(time.Now().UnixNano()) // one step per idle period
	}
	for len(p.ready) > int(p.target.Load()) {
		select {
		case in := <-p.ready:
			t.pooled.Add(-in.heldBytes())
			_ = in.mod.Close(context.Background())
		default:
			return
		}
	}
}

// recycle handles an instance a call gave back: one that can be reset goes
// back into the pool (instance.reset), any other is closed. It reports whether
// the pool lost an instance it should replace.
func (t *reactorHandler) recycle(p *pool, in *instance, budget int64) (replace bool) {
	if in.snap == nil {
		if in.reusable {
			in.learnFrom()
		}
		_ = in.mod.Close(context.Background())
		return false
	}
	p.out.Add(-1)
	if in.reusable && len(p.ready) < cap(p.ready) && in.reset() && t.putBack(p, in, budget) {
		return false
	}
	_ = in.mod.Close(context.Background())
	return true
}

// putBack puts a reset instance into the pool if the pool has room and the
// executor's pool budget allows it, and reports whether it did.
func (t *reactorHandler) putBack(p *pool, in *instance, budget int64) bool {
	size := in.heldBytes()
	if t.pooled.Add(size) <= budget {
		select {
		case p.ready <- in:
			return true
		default:
		}
	}
	t.pooled.Add(-size)
	return false
}

// inlineResetMax is the largest snapshot the caller resets itself after its
// call (a copy of a few microseconds) even when the pool has instances
// ready: waking the refill goroutine and waiting for it to run costs more
// than such a copy. A larger instance is handed to the refill goroutine,
// off the caller's path, unless the pool is empty: then the next call would
// instantiate anew, which costs more than the reset (a standard-Go guest:
// a few hundred microseconds, loaded from its image, against tens for
// copying back the pages a call wrote, instance.reset).
const inlineResetMax = 256 << 10

// recycleInline resets a recyclable instance on the caller's goroutine and
// puts it back into the pool, when that is the cheaper way (see
// inlineResetMax). It reports whether it did.
func (t *reactorHandler) recycleInline(in *instance) bool {
	p := t.pool
	if p == nil || in.snap == nil || !in.reusable || t.closed.Load() ||
		(in.snap.st.memSize > inlineResetMax && len(p.ready) > 0) {
		return false
	}
	budget, _ := t.cfg.poolLimits()
	if len(p.ready) >= cap(p.ready) || !in.reset() || !t.putBack(p, in, budget) {
		return false
	}
	p.out.Add(-1)
	return true
}

// retireQueue is how many used instances may wait for the refill goroutine
// to close them; past it the caller closes its own.
const retireQueue = 16

// retire gives back a used instance. A pooled tool hands it to its refill
// goroutine, which recycles it (instance.reset) or closes it off the caller's
// path (unmapping memory costs more than a small call); without a pool it is
// closed here.
func (t *reactorHandler) retire(in *instance) {
	if p := t.pool; p != nil {
		if !t.closed.Load() {
			select {
			case p.retired <- in:
				return
			default:
			}
		}
		if in.snap != nil {
			p.out.Add(-1)
		}
	}
	if in.reusable && in.snap == nil {
		in.learnFrom()
	}
	_ = in.mod.Close(context.Background())
}

// takeInstance returns a ready instance (pooled, or warm for posture none
// and made for calls with the same needs, key), or nil when none is ready.
func (t *reactorHandler) takeInstance(key needsKey) *instance {
	if p := t.pool; p != nil {
		p.lastTake.Store(time.Now().UnixNano())
		var in *instance
		select {
		case in = <-p.ready:
			t.pooled.Add(-in.heldBytes())
			if in.recycled > 0 {
				p.recycled.Add(1)
			}
		default:
			// A miss: the pool was too small for this load.
			if tg := p.target.Load(); int(tg) < cap(p.ready) {
				p.target.CompareAndSwap(tg, tg+1)
			}
		}
		// Wake the refill goroutine unless a recyclable instance was taken
		// from a pool that will be full again when it comes back: a wake-up
		// costs the caller a futex call. While the pool still has instances
		// ready it is woken when the call is over (run: wakeRefill), so that
		// the new instance is not built while the call runs — on a busy
		// machine the two compete for the CPU, and a never-used Go
		// instance's call took 2–3 times as long with its refill running
		// beside it. A miss, or a take that emptied the pool (calls come
		// faster than the pool refills), wakes it now.
		comesBack := in != nil && in.snap != nil && len(p.ready)+int(p.out.Load())+1 >= int(p.target.Load())
		switch {
		case comesBack:
		case in == nil || len(p.ready) == 0:
			t.wakeRefill()
		default:
			in.wake = true
		}
		return in
	}
	return t.idle.take(key)
}

// wakeRefill asks the refill goroutine to top the pool up.
func (t *reactorHandler) wakeRefill() {
	if p := t.pool; p != nil {
		select {
		case p.need <- struct{}{}:
		default:
		}
	}
}

// warmSet holds the warm instances of a posture-none reactor tool, at most
// max of them over all keys; a full set gives up its least recently kept
// instance for the new one.
type warmSet struct {
	mu  sync.Mutex
	max int
	ins []*instance
}

func newWarmSet(n int) *warmSet { return &warmSet{max: n} }

// take removes and returns a warm instance made for key, or nil.
func (w *warmSet) take(key needsKey) *instance {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.ins) - 1; i >= 0; i-- {
		if in := w.ins[i]; in.needs == key {
			w.ins = append(w.ins[:i], w.ins[i+1:]...)
			return in
		}
	}
	return nil
}

// put keeps in as a warm instance for calls with key and reports whether it
// did (false: no set). A full set evicts its oldest instance, which the
// caller must close.
func (w *warmSet) put(in *instance, key needsKey) (kept bool, evicted *instance) {
	if w == nil || w.max <= 0 {
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ins) >= w.max {
		evicted = w.ins[0]
		w.ins = append(w.ins[:0], w.ins[1:]...)
	}
	in.needs = key
	w.ins = append(w.ins, in)
	return true, evicted
}

// drain removes and returns every warm instance.
func (w *warmSet) drain() []*instance {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ins := w.ins
	w.ins = nil
	return ins
}

// putWarm keeps in, which just served a call with key cleanly, for the next
// call with the same key, when t keeps warm instances (posture none); it
// reports whether it did.
func (t *reactorHandler) putWarm(in *instance, key needsKey) bool {
	if t.closed.Load() {
		return false
	}
	kept, evicted := t.idle.put(in, key)
	if evicted != nil {
		_ = evicted.mod.Close(context.Background())
	}
	return kept
}

// stopPool stops the refill goroutine and closes the pooled instances. It
// reports false when the refill did not end within 30 s (an instantiation
// that ignored its cancelled context): the runtime must then stay open, a
// leak rather than a guest running on unmapped memory.
func (t *reactorHandler) stopPool(ctx context.Context) bool {
	p := t.pool
	if p == nil {
		return true
	}
	p.closed.Do(func() { close(p.stop); p.haltStop() })
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		return false
	}
	for {
		select {
		case in := <-p.ready:
			t.pooled.Add(-in.heldBytes())
			_ = in.mod.Close(ctx)
		case in := <-p.retired:
			_ = in.mod.Close(ctx)
		default:
			return true
		}
	}
}

// PooledBytes returns the linear memory held by all idle pre-warmed
// instances of the executor's tools.
func (e *Executor) PooledBytes() int64 { return e.pooledBytes.Load() }
