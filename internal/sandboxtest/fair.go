package sandboxtest

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A FairCall makes one call of a fairness measurement (issue 25's: one
// tenant floods a tool, another calls it at a pace) and says how it went:
// it ran (the tool answered, even with a tool error), it was refused
// (refusal says why, for the log), or it could not be made (err, which
// fails the test).
type FairCall func() (ran bool, refusal string, err error)

// Paced makes n calls, one every interval, each on its own goroutine (so
// a slow answer does not delay the next call), and returns the latencies
// of those that ran and how many were refused (each logged). A call's err
// fails t and counts as neither.
func Paced(t testing.TB, n int, every time.Duration, call FairCall) (lat []time.Duration, refused int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range n {
		if i > 0 {
			<-tick.C
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			ran, why, err := call()
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case ran:
				lat = append(lat, d)
			default:
				refused++
				t.Logf("paced call refused: %s", why)
			}
		}()
	}
	wg.Wait()
	return lat, refused
}

// P99 is the 99th percentile of lat (its largest value below 100
// samples; 0 for none).
func P99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// A Flood is conns clients calling back to back until Stop. A refused
// client comes back after 50 ms, not after its Retry-After: it floods. A
// call's err fails the test and ends its client.
type Flood struct {
	stop         chan struct{}
	once         sync.Once
	wg           sync.WaitGroup
	ran, refused atomic.Int64
	reasons      sync.Map
}

// StartFlood starts conns clients making call.
func StartFlood(t testing.TB, conns int, call FairCall) *Flood {
	f := &Flood{stop: make(chan struct{})}
	for range conns {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				select {
				case <-f.stop:
					return
				default:
				}
				ran, why, err := call()
				switch {
				case err != nil:
					t.Error(err)
					return
				case ran:
					f.ran.Add(1)
				default:
					f.refused.Add(1)
					f.reasons.Store(why, true)
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	return f
}

// Stop stops the clients and waits for them; it may be called again.
func (f *Flood) Stop() {
	f.once.Do(func() { close(f.stop) })
	f.wg.Wait()
}

// Ran is how many of the flood's calls ran so far.
func (f *Flood) Ran() int64 { return f.ran.Load() }

// Refused is how many of the flood's calls were refused so far.
func (f *Flood) Refused() int64 { return f.refused.Load() }

// Reasons lists the refusals' reasons seen so far, sorted.
func (f *Flood) Reasons() []string {
	var why []string
	f.reasons.Range(func(k, _ any) bool { why = append(why, k.(string)); return true })
	slices.Sort(why)
	return why
}

// Attempts runs measure up to n times, until one returns no problems: a
// fairness measurement depends on the machine's load as well as on
// admission, so its bounds must hold once (admission that lets the flood
// take the service fails every run). It logs the problems of each failed
// attempt and fails t with the last ones if none passed.
func Attempts(t testing.TB, n int, measure func() (problems []string)) {
	t.Helper()
	var problems []string
	for attempt := 1; attempt <= n; attempt++ {
		if problems = measure(); len(problems) == 0 {
			return
		}
		t.Logf("attempt %d: %s", attempt, strings.Join(problems, "; "))
	}
	t.Error(strings.Join(problems, "; "))
}
