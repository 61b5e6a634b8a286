package limits

import (
	"sync"
	"time"
)

// minPoll bounds how often a watchdog reads the clock, so a budget of a few
// microseconds cannot turn it into a busy loop.
const minPoll = 500 * time.Microsecond

// Watchdog stops a guest that uses more CPU time than its budget. It reads a
// ThreadClock from a timer callback; because a thread cannot consume CPU time
// faster than wall time passes, it waits for exactly the budget that remains
// and re-reads, so it overshoots only by timer latency, never by a polling
// period. A call that finishes within its budget costs one timer, no
// goroutine.
type Watchdog struct {
	clock    ThreadClock
	start    time.Duration
	budget   time.Duration
	onExceed func(time.Duration)
	exceeder Exceeder    // AcquireWatchdog's, instead of onExceed
	poll     func() bool // Expired, bound once (Poll)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	fired   bool
}

// Exceeder is told when the budget of a watchdog from AcquireWatchdog is
// spent, once, with the consumption observed then.
type Exceeder interface {
	CPUExceeded(used time.Duration)
}

// StartWatchdog starts watching clock from now on. When the CPU time consumed
// since now reaches budget, onExceed runs once (on a timer goroutine) with the
// consumption observed at that moment. budget <= 0 means no limit: the
// watchdog only measures. Stop must be called exactly once.
func StartWatchdog(clock ThreadClock, budget time.Duration, onExceed func(used time.Duration)) *Watchdog {
	w := &Watchdog{clock: clock, start: clock.Now(), budget: budget, onExceed: onExceed}
	if budget > 0 {
		w.mu.Lock()
		w.timer = time.AfterFunc(budget, w.check)
		w.mu.Unlock()
	}
	return w
}

// watchdogs is AcquireWatchdog's free list.
var watchdogs sync.Pool

// AcquireWatchdog is StartWatchdog for a per-call path: the Watchdog comes
// from a free list with its timer (so a call allocates neither), and x is
// told when the budget is spent. After Stop, Release gives the Watchdog
// back; it must not be used after that.
//
// A timer callback of the Watchdog's previous use may still run after it
// was released and acquired again (Stop cannot wait for one already
// started): it then checks the new use's budget on the new use's clock,
// which is what the new use's own timer does, so it can tell x only of a
// budget that is really spent.
func AcquireWatchdog(clock ThreadClock, budget time.Duration, x Exceeder) *Watchdog {
	w, _ := watchdogs.Get().(*Watchdog)
	if w == nil {
		w = &Watchdog{}
		w.poll = w.Expired
	}
	start := clock.Now()
	w.mu.Lock()
	w.clock, w.start, w.budget, w.exceeder, w.onExceed = clock, start, budget, x, nil
	w.stopped, w.fired = false, false
	if budget > 0 {
		if w.timer == nil {
			w.timer = time.AfterFunc(budget, w.check)
		} else {
			w.timer.Reset(budget)
		}
	}
	w.mu.Unlock()
	return w
}

// Release gives a stopped Watchdog from AcquireWatchdog back to the free
// list, without the Exceeder it held.
func (w *Watchdog) Release() {
	w.mu.Lock()
	if !w.stopped {
		w.mu.Unlock()
		panic("limits: Release of a running Watchdog")
	}
	w.exceeder, w.onExceed = nil, nil
	w.mu.Unlock()
	watchdogs.Put(w)
}

// Poll returns Expired as a function value (a fuel meter's poll) without
// allocating one for a Watchdog from AcquireWatchdog.
func (w *Watchdog) Poll() func() bool {
	if w.poll != nil {
		return w.poll
	}
	return w.Expired
}

// exceed tells the budget is spent. w.mu is held.
func (w *Watchdog) exceed(used time.Duration) {
	w.fired = true
	if w.exceeder != nil {
		w.exceeder.CPUExceeded(used)
		return
	}
	w.onExceed(used)
}

func (w *Watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.fired || w.budget <= 0 {
		return
	}
	used := w.clock.Now() - w.start
	if used >= w.budget {
		w.exceed(used)
		return
	}
	w.timer.Reset(max(w.budget-used, minPoll))
}

// Expired reports whether the budget is spent, reading the clock now; when
// it is and onExceed has not run yet, it runs onExceed first, on the calling
// goroutine. The guest's thread calls it at every fuel refill (about once a
// millisecond of guest work), so a budget is enforced even when the timer
// goroutine is late (a busy machine with one P held by the guest can delay
// timers by a scheduler quantum or more).
func (w *Watchdog) Expired() bool {
	if w == nil || w.budget <= 0 {
		return false
	}
	used := w.clock.Now() - w.start
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return true
	}
	if w.stopped || used < w.budget {
		return false
	}
	w.exceed(used)
	return true
}

// Used returns the CPU time consumed since the watchdog started.
func (w *Watchdog) Used() time.Duration { return w.clock.Now() - w.start }

// Stop ends watching and returns the CPU time consumed since the start and
// whether the budget was exceeded. It must be called from the watched thread
// (so the clock is still valid); after it returns, onExceed will not run.
func (w *Watchdog) Stop() (used time.Duration, exceeded bool) {
	used = w.Used()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	return used, w.fired
}
