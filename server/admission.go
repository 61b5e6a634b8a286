package server

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// This file is admission: which call runs when. A call needs three
// slots at once — a global one (Options.MaxConcurrency), one of its
// tool's (Options.PerToolConcurrency) and one of its tenant's
// (Options.PerTenantConcurrency; the tenant is the call context's
// tenantId) — and, when it cannot have them, it waits in its tenant's
// queue. Free slots are handed out by round-robin fair queuing over the
// tenants with waiting calls: each turn serves the next tenant in the
// ring whose oldest runnable call can run, so a tenant that floods the
// service waits behind its own calls and every other tenant's next call
// goes before its second. Within a tenant calls run in arrival order,
// except that a call whose tool is at its cap lets the tenant's next call
// to another tool pass.
//
// The state is bounded whatever the number of tenant ids callers send:
//
//   - a tenant has an entry (tenants) only while it has a call running or
//     waiting, so there are at most MaxConcurrency + QueueSize entries;
//     ids are keyed by a 64-bit keyed hash (maphash with a per-process
//     seed), so the table holds no caller bytes;
//   - the CPU used by each tenant in the current window lives in a
//     count-min sketch of fixed size (cpuRows × cpuCols cells): a tenant's
//     use is the smaller of its two cells, so it can be over-estimated
//     only when another tenant heavy enough shares both of its cells.
//
// One mutex guards it all: admission is a few map and counter operations
// per call, far below a guest call's cost.

// The admission refusals besides RefusedOverCapacity.
const (
	// RefusedTenantQueue: the call's tenant already has
	// Options.PerTenantQueue calls waiting.
	RefusedTenantQueue Refusal = "tenant-queue-full"
	// RefusedTenantCPU: the call's tenant spent its CPU budget of the
	// current window (Options.PerTenantCPUBudget); Outcome.RetryAfter is
	// the rest of the window.
	RefusedTenantCPU Refusal = "tenant-cpu-budget"
)

// Sizes of the CPU sketch: two rows of 256 cells (8 KiB).
const (
	cpuRows = 2
	cpuCols = 256
)

// admission is the fair admission state of a Server.
type admission struct {
	capacity    int // global slots
	queueCap    int // calls waiting, all tenants
	perTenant   int // slots per tenant
	tenantQueue int // calls waiting per tenant
	cpuBudget   float64
	cpuWindow   time.Duration
	seed        maphash.Seed
	now         func() time.Time

	mu       sync.Mutex
	inflight int
	queued   int
	tenants  map[uint64]*tenantState
	free     []*tenantState // spare entries, so that a call allocates none
	ring     *tenantState   // the next tenant to serve (nil: nobody waits)
	ringN    int            // tenants in the ring
	cpu      [cpuRows][cpuCols]cpuCell
}

// tenantState is one tenant's running count and queue.
type tenantState struct {
	key        uint64
	inflight   int
	waiters    []*waiter
	next, prev *tenantState // in the ring while waiters is not empty
}

// waiter is one call waiting for its slots.
type waiter struct {
	tool    *toolSlots
	ready   chan struct{} // closed when granted
	granted bool
}

// toolSlots is a tool's cap and running count (guarded by admission.mu).
type toolSlots struct {
	cap, inflight int
}

// cpuCell is a tenant-hash cell of the CPU sketch: milliseconds spent in
// the window that starts at epoch (in windows since the Unix epoch).
type cpuCell struct {
	epoch int64
	ms    float64
}

func newAdmission(o Options) *admission {
	return &admission{
		capacity: o.MaxConcurrency, queueCap: o.QueueSize, perTenant: o.PerTenantConcurrency, tenantQueue: o.PerTenantQueue,
		cpuBudget: float64(o.PerTenantCPUBudget) / float64(time.Millisecond), cpuWindow: o.PerTenantCPUWindow,
		seed: maphash.MakeSeed(), now: time.Now, tenants: map[uint64]*tenantState{},
	}
}

// slot is what an admitted call holds; leave gives it back.
type slot struct {
	t    *tenantState
	tool *toolSlots
}

// tenantKey is the keyed hash a tenant id is known by.
func (a *admission) tenantKey(tenant string) uint64 { return maphash.String(a.seed, tenant) }

// enter takes the call's slots, waiting in its tenant's queue if there is
// room until ctx ends or deadline (zero: none) passes. A refusal comes
// with the time after which a retry may succeed (zero: the default); err
// is ctx's error when ctx ended while queued, context.DeadlineExceeded
// when the deadline passed.
func (a *admission) enter(ctx context.Context, deadline time.Time, tenant string, tool *toolSlots) (s slot, refused Refusal, retry time.Duration, err error) {
	key := a.tenantKey(tenant)
	a.mu.Lock()
	if a.cpuBudget > 0 {
		if used, epoch := a.cpuUsed(key); used >= a.cpuBudget {
			a.mu.Unlock()
			end := time.Unix(0, (epoch+1)*int64(a.cpuWindow))
			return slot{}, RefusedTenantCPU, end.Sub(a.now()), nil
		}
	}
	t := a.tenants[key]
	if t == nil {
		t = a.newTenant(key)
	}
	// Every waiter that could run has been granted (dispatch runs after
	// every change), so a call that can run now takes nobody's turn.
	if a.runnable(t, tool) {
		a.grant(t, tool)
		a.mu.Unlock()
		return slot{t, tool}, "", 0, nil
	}
	switch {
	case a.queued >= a.queueCap:
		refused = RefusedOverCapacity
	case len(t.waiters) >= a.tenantQueue:
		refused = RefusedTenantQueue
	}
	if refused != "" {
		a.forget(t)
		a.mu.Unlock()
		return slot{}, refused, 0, nil
	}
	w := &waiter{tool: tool, ready: make(chan struct{})}
	t.waiters = append(t.waiters, w)
	a.queued++
	if len(t.waiters) == 1 {
		a.link(t)
	}
	a.mu.Unlock()

	var expired <-chan time.Time
	if !deadline.IsZero() {
		tm := time.NewTimer(time.Until(deadline))
		defer tm.Stop()
		expired = tm.C
	}
	select {
	case <-w.ready:
		return slot{t, tool}, "", 0, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	a.mu.Lock()
	if w.granted { // granted as the wait ended: give the slots back
		a.mu.Unlock()
		a.leave(slot{t, tool}, 0)
		return slot{}, "", 0, err
	}
	for i, x := range t.waiters {
		if x == w {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			t.waiters[len(t.waiters):cap(t.waiters)][0] = nil // keep no pointer past the end
			break
		}
	}
	a.queued--
	if len(t.waiters) == 0 {
		a.unlink(t)
	}
	a.forget(t)
	a.mu.Unlock()
	return slot{}, "", 0, err
}

// leave gives s back, charges the tenant cpuMs and hands the freed slots
// to waiting calls.
func (a *admission) leave(s slot, cpuMs float64) {
	a.mu.Lock()
	a.inflight--
	s.t.inflight--
	s.tool.inflight--
	if cpuMs > 0 && a.cpuBudget > 0 {
		a.chargeCPU(s.t.key, cpuMs)
	}
	a.dispatch()
	a.forget(s.t)
	a.mu.Unlock()
}

// runnable reports whether a call of t to tool can take its slots now.
func (a *admission) runnable(t *tenantState, tool *toolSlots) bool {
	return a.inflight < a.capacity && t.inflight < a.perTenant && tool.inflight < tool.cap
}

func (a *admission) grant(t *tenantState, tool *toolSlots) {
	a.inflight++
	t.inflight++
	tool.inflight++
}

// dispatch grants waiting calls while slots are free: round robin over
// the ring, each tenant's oldest call that can run. It stops after a full
// turn of the ring grants nothing.
func (a *admission) dispatch() {
	idle := 0 // tenants visited since the last grant
	for a.ring != nil && a.inflight < a.capacity {
		t := a.ring
		a.ring = t.next
		if t.inflight < a.perTenant {
			for i, w := range t.waiters {
				if w.tool.inflight >= w.tool.cap {
					continue
				}
				t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
				t.waiters[len(t.waiters):cap(t.waiters)][0] = nil
				a.queued--
				a.grant(t, w.tool)
				w.granted = true
				close(w.ready)
				if len(t.waiters) == 0 {
					a.unlink(t)
				}
				idle = -1
				break
			}
		}
		idle++
		if idle >= a.ringN {
			return
		}
	}
}

// link puts t in the ring, last (just before the next tenant served).
func (a *admission) link(t *tenantState) {
	a.ringN++
	if a.ring == nil {
		t.next, t.prev = t, t
		a.ring = t
		return
	}
	last := a.ring.prev
	t.prev, t.next = last, a.ring
	last.next = t
	a.ring.prev = t
}

func (a *admission) unlink(t *tenantState) {
	a.ringN--
	if t.next == t {
		a.ring = nil
	} else {
		t.prev.next, t.next.prev = t.next, t.prev
		if a.ring == t {
			a.ring = t.next
		}
	}
	t.next, t.prev = nil, nil
}

func (a *admission) newTenant(key uint64) *tenantState {
	var t *tenantState
	if n := len(a.free); n > 0 {
		t = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		t = &tenantState{}
	}
	t.key = key
	a.tenants[key] = t
	return t
}

// forget drops t's entry when it has nothing running or waiting. Spare
// entries are kept up to the most that can be in use at once.
func (a *admission) forget(t *tenantState) {
	if t.inflight > 0 || len(t.waiters) > 0 {
		return
	}
	delete(a.tenants, t.key)
	if len(a.free) < a.capacity+a.queueCap {
		t.waiters = t.waiters[:0]
		a.free = append(a.free, t)
	}
}

// cpuUsed is the tenant's CPU estimate in the current window, and the
// window's epoch.
func (a *admission) cpuUsed(key uint64) (float64, int64) {
	epoch := a.now().UnixNano() / int64(a.cpuWindow)
	used := -1.0
	for r := range cpuRows {
		c := &a.cpu[r][cpuIndex(key, r)]
		ms := 0.0
		if c.epoch == epoch {
			ms = c.ms
		}
		if used < 0 || ms < used {
			used = ms
		}
	}
	return used, epoch
}

func (a *admission) chargeCPU(key uint64, ms float64) {
	epoch := a.now().UnixNano() / int64(a.cpuWindow)
	for r := range cpuRows {
		c := &a.cpu[r][cpuIndex(key, r)]
		if c.epoch != epoch {
			c.epoch, c.ms = epoch, 0
		}
		c.ms += ms
	}
}

// cpuIndex is the tenant's cell in row r: independent bits of its hash.
func cpuIndex(key uint64, r int) int { return int((key >> (r * 32)) % cpuCols) }

// stats returns the calls running and waiting, and the tenants that have
// some.
func (a *admission) stats() (inflight, queued, tenants int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight, a.queued, len(a.tenants)
}

// queueStats returns the tenants in the fair queue's ring and the longest
// tenant queue (a walk of the ring: at most queueCap entries).
func (a *admission) queueStats() (waiting, longest int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ring == nil {
		return 0, 0
	}
	for ts, i := a.ring, 0; i < a.ringN; ts, i = ts.next, i+1 {
		longest = max(longest, len(ts.waiters))
	}
	return a.ringN, longest
}

// toolInflight returns the calls running on tool.
func (a *admission) toolInflight(tool *toolSlots) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return tool.inflight
}
