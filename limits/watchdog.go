package limits

import (
	"sync"
	"time"
)

// minPoll bounds how often a watchdog reads the clock, so a budget of a few
// microseconds cannot turn it into a busy loop.
const minPoll = 500 * time.Microsecond

// Watchdog stops a guest that uses more CPU time than its budget. It reads a
// ThreadClock from its own goroutine; because a thread cannot consume CPU time
// faster than wall time passes, it sleeps for exactly the budget that remains
// and re-reads, so it overshoots only by timer latency, never by a polling
// period.
type Watchdog struct {
	clock  ThreadClock
	start  time.Duration
	budget time.Duration

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	fired    bool // written by the watchdog goroutine before close(done)
}

// StartWatchdog starts watching clock from now on. When the CPU time consumed
// since now reaches budget, onExceed runs once (on the watchdog's goroutine)
// with the consumption observed at that moment. budget <= 0 means no limit:
// the watchdog only measures. Stop must be called exactly once.
func StartWatchdog(clock ThreadClock, budget time.Duration, onExceed func(used time.Duration)) *Watchdog {
	w := &Watchdog{clock: clock, start: clock.Now(), budget: budget, stop: make(chan struct{}), done: make(chan struct{})}
	if budget <= 0 {
		close(w.done)
		return w
	}
	go w.run(onExceed)
	return w
}

func (w *Watchdog) run(onExceed func(time.Duration)) {
	defer close(w.done)
	timer := time.NewTimer(w.budget)
	defer timer.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-timer.C:
		}
		used := w.clock.Now() - w.start
		if used >= w.budget {
			w.fired = true
			onExceed(used)
			return
		}
		timer.Reset(max(w.budget-used, minPoll))
	}
}

// Used returns the CPU time consumed since the watchdog started.
func (w *Watchdog) Used() time.Duration { return w.clock.Now() - w.start }

// Stop ends watching and returns the CPU time consumed since the start and
// whether the budget was exceeded. It must be called from the watched thread
// (so the clock is still valid) and waits for the watchdog goroutine.
func (w *Watchdog) Stop() (used time.Duration, exceeded bool) {
	used = w.Used()
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	return used, w.fired
}
