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

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	fired   bool
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

func (w *Watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.fired {
		return
	}
	used := w.clock.Now() - w.start
	if used >= w.budget {
		w.fired = true
		w.onExceed(used)
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
	w.fired = true
	w.onExceed(used)
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
