package executor

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/manifest"
)

// pool keeps pre-instantiated, never-used reactor instances for a
// context-isolated or strict tool, so a call takes a fresh instance without
// paying for instantiation and _initialize. A background goroutine refills it
// after every take. Instances are created without any call's data (no input,
// no env), so nothing of one call can reach another.
type pool struct {
	ready   chan *instance
	retired chan *instance // used instances for the refill goroutine to close
	need    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
}

// WithPoolSize sets how many pre-warmed instances each context-isolated or
// strict reactor tool keeps ready (0 disables pooling). Tools that declare
// needsSpec.env are not pooled: their WASI environment comes with each call.
func (c Config) WithPoolSize(n int) Config {
	c.poolSize = max(n, 0)
	c.poolSizeSet = true
	return c
}

// defaultPoolSize applies when WithPoolSize was not called.
const defaultPoolSize = 2

func (t *Tool) poolable() bool {
	return t.style == Reactor &&
		(t.posture == manifest.PostureContextIsolated || t.posture == manifest.PostureStrict) &&
		len(t.needs.env) == 0
}

func (t *Tool) startPool() {
	size := defaultPoolSize
	if t.exec.cfg.poolSizeSet {
		size = t.exec.cfg.poolSize
	}
	if size == 0 || !t.poolable() {
		return
	}
	p := &pool{ready: make(chan *instance, size), retired: make(chan *instance, retireQueue), need: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	t.pool = p
	go t.refill(p)
	p.need <- struct{}{}
}

// refill tops the pool up whenever a call took an instance. A failure to
// instantiate stops refilling until the next take, so a module whose
// _initialize fails costs its callers, not a spinning background loop.
func (t *Tool) refill(p *pool) {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case in := <-p.retired:
			_ = in.mod.Close(context.Background())
			continue
		case <-p.need:
		}
		for len(p.ready) < cap(p.ready) {
			ctx, cancel := context.WithTimeout(context.Background(), t.exec.cfg.defaultTimeout)
			in, err := t.newInstance(ctx, nil, newLineForwarder(t.exec.cfg.guestStdout, t.ID(), "stdout"), newLineForwarder(t.exec.cfg.guestStderr, t.ID(), "stderr"))
			cancel()
			if err != nil {
				break
			}
			select {
			case p.ready <- in:
			case <-p.stop:
				_ = in.mod.Close(context.Background())
				return
			}
		}
	}
}

// retireQueue is how many used instances may wait for the refill goroutine
// to close them; past it the caller closes its own.
const retireQueue = 16

// retire closes a used instance. A pooled tool hands it to its refill
// goroutine, so closing it (unmapping its memory) is off the caller's path;
// the instance is never used again either way.
func (t *Tool) retire(in *instance) {
	if p := t.pool; p != nil && !t.closed.Load() {
		select {
		case p.retired <- in:
			return
		default:
		}
	}
	_ = in.mod.Close(context.Background())
}

// takeInstance returns a ready instance (pooled, or warm for posture none),
// or nil when none is ready.
func (t *Tool) takeInstance() *instance {
	if p := t.pool; p != nil {
		select {
		case in := <-p.ready:
			select {
			case p.need <- struct{}{}:
			default:
			}
			return in
		default:
			select {
			case p.need <- struct{}{}:
			default:
			}
			return nil
		}
	}
	if t.idle != nil {
		select {
		case in := <-t.idle:
			return in
		default:
		}
	}
	return nil
}

func (t *Tool) stopPool(ctx context.Context) {
	p := t.pool
	if p == nil {
		return
	}
	p.closed.Do(func() { close(p.stop) })
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
	for {
		select {
		case in := <-p.ready:
			_ = in.mod.Close(ctx)
		case in := <-p.retired:
			_ = in.mod.Close(ctx)
		default:
			return
		}
	}
}

// switchWriter forwards to the writer of the call an instance currently
// serves; between calls (nil target) writes go to the instance's own
// forwarder given at creation.
type switchWriter struct {
	mu     sync.Mutex
	def    *lineForwarder
	target *lineForwarder
}

func newSwitchWriter(def *lineForwarder) *switchWriter { return &switchWriter{def: def} }

// Switch routes later writes to w (nil: back to the default).
func (s *switchWriter) Switch(w *lineForwarder) {
	s.mu.Lock()
	s.target = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	var w io.Writer = s.def
	if s.target != nil {
		w = s.target
	}
	s.mu.Unlock()
	return w.Write(p)
}

// PoolStats reports the tool's pre-warmed instances: how many are ready now
// and how many the pool keeps. Both are 0 for a tool that is not pooled
// (posture none, command style, declared env, declarative HTTP, pool size 0).
func (t *Tool) PoolStats() (ready, capacity int) {
	if p := t.pool; p != nil {
		return len(p.ready), cap(p.ready)
	}
	return 0, 0
}
