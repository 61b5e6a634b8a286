package sandboxtest_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// Paced makes its calls one every interval, concurrently (a slow call
// does not delay the next), and sorts them into ran and refused.
func TestPaced(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	lat, refused := sandboxtest.Paced(t, 10, 10*time.Millisecond, func() (bool, string, error) {
		i := n.Add(1)
		time.Sleep(50 * time.Millisecond)
		return i%5 != 0, fmt.Sprint("call ", i), nil
	})
	took := time.Since(start)
	if len(lat) != 8 || refused != 2 {
		t.Fatalf("%d ran, %d refused, want 8 and 2", len(lat), refused)
	}
	for _, d := range lat {
		if d < 50*time.Millisecond {
			t.Fatalf("latency %v of a 50 ms call", d)
		}
	}
	// Sequential calls would take 10 x 50 ms; paced ones 9 x 10 + 50.
	if took < 130*time.Millisecond || took > 450*time.Millisecond {
		t.Fatalf("10 paced calls took %v", took)
	}
}

// P99 is the largest of fewer than 100 samples, and not the largest of
// 200.
func TestP99(t *testing.T) {
	var lat []time.Duration
	for i := range 200 {
		lat = append(lat, time.Duration(200-i))
	}
	if got := sandboxtest.P99(lat[:50]); got != 200 {
		t.Fatalf("p99 of 50 = %v, want 200", got)
	}
	if got := sandboxtest.P99(lat); got != 199 {
		t.Fatalf("p99 of 200 = %v, want 199", got)
	}
	if lat[0] != 200 || sandboxtest.P99(nil) != 0 {
		t.Fatal("P99 sorted its argument or has a value for none")
	}
}

// A Flood calls back to back until Stop, counting what ran and what was
// refused with its reasons; a refused client waits 50 ms.
func TestFlood(t *testing.T) {
	var n atomic.Int64
	fl := sandboxtest.StartFlood(t, 4, func() (bool, string, error) {
		if n.Add(1)%2 == 0 {
			return false, "full", nil
		}
		return true, "", nil
	})
	for fl.Refused() < 8 {
		time.Sleep(time.Millisecond)
	}
	fl.Stop()
	fl.Stop()
	ran, refused := fl.Ran(), fl.Refused()
	if ran+refused != n.Load() || ran == 0 || !slices.Equal(fl.Reasons(), []string{"full"}) {
		t.Fatalf("ran %d, refused %d of %d calls, reasons %v", ran, refused, n.Load(), fl.Reasons())
	}
	time.Sleep(20 * time.Millisecond)
	if n.Load() != ran+refused {
		t.Fatal("calls after Stop")
	}
}

// Attempts stops at the first attempt without problems and fails t with
// the last problems when none passes.
func TestAttempts(t *testing.T) {
	calls := 0
	sandboxtest.Attempts(t, 3, func() []string {
		if calls++; calls < 2 {
			return []string{"slow"}
		}
		return nil
	})
	if calls != 2 || t.Failed() {
		t.Fatalf("%d attempts (failed %v), want 2", calls, t.Failed())
	}
	ft := &fakeT{}
	calls = 0
	sandboxtest.Attempts(ft, 3, func() []string { calls++; return []string{"a", fmt.Sprint(calls)} })
	if calls != 3 || ft.errs != "a; 3" {
		t.Fatalf("%d attempts, error %q", calls, ft.errs)
	}
}

type fakeT struct {
	testing.TB
	errs string
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Logf(string, ...any)   {}
func (f *fakeT) Error(args ...any)     { f.errs = fmt.Sprint(args...) }
func (f *fakeT) Errorf(string, ...any) { panic(errors.New("unexpected Errorf")) }
