package limits

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func spin(d time.Duration, clock ThreadClock) {
	start := clock.Now()
	for clock.Now()-start < d {
	}
}

func TestThreadClockCountsCPUNotSleep(t *testing.T) {
	if !Supported() {
		t.Skip("no per-thread CPU clock")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := CurrentThread()
	before := c.Now()
	time.Sleep(50 * time.Millisecond)
	slept := c.Now() - before
	spin(30*time.Millisecond, c)
	spun := c.Now() - before - slept
	if slept > 10*time.Millisecond {
		t.Fatalf("sleeping 50ms charged %v of CPU", slept)
	}
	if spun < 30*time.Millisecond {
		t.Fatalf("spinning 30ms charged only %v", spun)
	}
}

func TestWatchdogFiresOnceAfterBudget(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := CurrentThread()
	var fired atomic.Int32
	var at atomic.Int64
	w := StartWatchdog(c, 40*time.Millisecond, func(used time.Duration) { fired.Add(1); at.Store(int64(used)) })
	deadline := time.Now().Add(5 * time.Second)
	for fired.Load() == 0 && time.Now().Before(deadline) {
	}
	used, exceeded := w.Stop()
	if !exceeded || fired.Load() != 1 {
		t.Fatalf("exceeded=%v fired=%d", exceeded, fired.Load())
	}
	if got := time.Duration(at.Load()); got < 40*time.Millisecond || used < got {
		t.Fatalf("fired at %v, used %v", got, used)
	}
}

func TestWatchdogQuietWithinBudget(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := StartWatchdog(CurrentThread(), 30*time.Millisecond, func(time.Duration) { t.Error("fired while the thread slept") })
	time.Sleep(100 * time.Millisecond) // wall time passes, CPU time does not
	if _, exceeded := w.Stop(); exceeded {
		t.Fatal("exceeded while sleeping")
	}
	time.Sleep(50 * time.Millisecond) // no callback after Stop
}

func TestAccount(t *testing.T) {
	a := NewAccount(10 * PageSize)
	lm := newLinearMemory(a, 1<<32)
	if b := lm.Reallocate(4 * PageSize); len(b) != 4*PageSize {
		t.Fatalf("grow to 4 pages: %d", len(b))
	}
	if !a.Reserve(5 * PageSize) {
		t.Fatal("host reservation within the cap refused")
	}
	if b := lm.Reallocate(6 * PageSize); b != nil {
		t.Fatal("linear growth past the cap (with host buffers) allowed")
	}
	if a.Refused() != 11*PageSize {
		t.Fatalf("refused = %d", a.Refused())
	}
	a.Release(5 * PageSize)
	if b := lm.Reallocate(6 * PageSize); len(b) != 6*PageSize {
		t.Fatal("growth refused after release")
	}
	if a.Peak() != 9*PageSize {
		t.Fatalf("peak = %d", a.Peak())
	}
	a.Reset()
	if a.Refused() != 0 || a.Peak() != 6*PageSize {
		t.Fatalf("after reset: refused %d peak %d", a.Refused(), a.Peak())
	}
	if a.Reserve(-1) {
		t.Fatal("negative reservation accepted")
	}
	lm.Free()
	if a.Linear() != 0 {
		t.Fatal("free did not release linear memory")
	}
}

// Expired enforces the budget from the watched thread itself, without
// waiting for the timer: with the timer unable to fire first (its budget is
// an hour of wall time away from being checked again), a spin past the
// budget is seen at the next Expired, which runs onExceed exactly once.
func TestWatchdogExpiredWithoutTimer(t *testing.T) {
	if !Supported() {
		t.Skip("no per-thread CPU clock")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := CurrentThread()
	var fired atomic.Int32
	w := StartWatchdog(clock, 5*time.Millisecond, func(time.Duration) { fired.Add(1) })
	w.mu.Lock()
	w.timer.Stop() // only Expired can notice now
	w.mu.Unlock()
	if w.Expired() {
		t.Fatal("expired before any CPU was used")
	}
	spin(6*time.Millisecond, clock)
	if !w.Expired() {
		t.Fatal("not expired after spending the budget")
	}
	if !w.Expired() { // and it stays expired, without running onExceed again
		t.Fatal("expired only once")
	}
	if _, exceeded := w.Stop(); !exceeded || fired.Load() != 1 {
		t.Fatalf("exceeded %v, onExceed ran %d times", exceeded, fired.Load())
	}
	var nilW *Watchdog
	if nilW.Expired() {
		t.Fatal("a nil watchdog expired")
	}
}

// A watchdog from AcquireWatchdog tells its Exceeder once the budget is
// spent, and after Release it holds no Exceeder; acquired again it carries
// nothing of its previous use: a new budget of 0 never fires, even when the
// previous use's timer runs late.
func TestAcquireWatchdog(t *testing.T) {
	if !Supported() {
		t.Skip("no per-thread CPU clock")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := CurrentThread()
	x := &countExceeder{}
	w := AcquireWatchdog(clock, 5*time.Millisecond, x)
	spin(8*time.Millisecond, clock)
	if !w.Expired() {
		t.Fatal("not expired after spending the budget")
	}
	if _, exceeded := w.Stop(); !exceeded || x.n.Load() != 1 {
		t.Fatalf("exceeded %v, Exceeder told %d times", exceeded, x.n.Load())
	}
	w.Release()
	if w.exceeder != nil {
		t.Fatal("a released watchdog keeps its Exceeder")
	}
	// The next use, with no budget: the old timer firing (as a late one
	// would) must not tell the new Exceeder.
	y := &countExceeder{}
	w2 := AcquireWatchdog(clock, 0, y)
	w2.check()
	spin(2*time.Millisecond, clock)
	if w2.Expired() || y.n.Load() != 0 {
		t.Fatalf("a watchdog without a budget expired (told %d times)", y.n.Load())
	}
	if used, exceeded := w2.Stop(); exceeded || used < time.Millisecond {
		t.Fatalf("used %v, exceeded %v", used, exceeded)
	}
	w2.Release()
	defer func() {
		if recover() == nil {
			t.Error("Release of a running watchdog did not panic")
		}
	}()
	AcquireWatchdog(clock, time.Hour, y).Release()
}

type countExceeder struct{ n atomic.Int32 }

func (c *countExceeder) CPUExceeded(time.Duration) { c.n.Add(1) }
