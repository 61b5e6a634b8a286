package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
)

// TestValidatingCharges: validating charges a validation its wall time
// until a work check wallBeforeMetering after it began and its thread's CPU
// time from that check on, so a short validation reads no thread clock
// (each read a system call) and a long one is charged CPU, not the time its
// thread was off the processor.
func TestValidatingCharges(t *testing.T) {
	if !limits.Supported() {
		t.Skip("no per-thread CPU clock")
	}
	env := &toolEnv{limits: toolLimits{cpuMs: 10000}}
	ctx := context.Background()

	t.Run("short-wall", func(t *testing.T) {
		// No Check is reached: what it took is its wall time, sleep included
		// (the thread CPU clock would say almost nothing).
		const sleep = 3 * time.Millisecond
		cpu, err := env.validating(ctx, 0, func(manifest.Work) error {
			time.Sleep(sleep)
			return nil
		})
		if err != nil || cpu < sleep {
			t.Fatalf("validating = %v, %v; want >= %v (its wall time)", cpu, err, sleep)
		}
	})

	t.Run("long-thread-cpu", func(t *testing.T) {
		// A Check before any work and one after 1 ms: metering starts at the
		// second; the 50 ms slept after it are not CPU and are not charged;
		// the 1 ms before it is.
		const early, late = time.Millisecond, 50 * time.Millisecond
		cpu, err := env.validating(ctx, 0, func(w manifest.Work) error {
			if err := w.Check(); err != nil {
				return err
			}
			time.Sleep(early)
			if err := w.Check(); err != nil {
				return err
			}
			time.Sleep(late)
			return w.Check()
		})
		if err != nil || cpu < early || cpu >= late {
			t.Fatalf("validating = %v, %v; want in [%v, %v): the wall time before metering, CPU after", cpu, err, early, late)
		}
	})

	t.Run("cpu-left", func(t *testing.T) {
		// Spinning with a Check every iteration under 5 ms left: stopped once
		// the charge passes 5 ms, whichever clock it was on.
		const left = 5 * time.Millisecond
		start := time.Now()
		cpu, err := env.validating(ctx, left, func(w manifest.Work) error {
			for time.Since(start) < 10*time.Second {
				if err := w.Check(); err != nil {
					return err
				}
			}
			return nil
		})
		if !errors.Is(err, errValidationCPU) || cpu < left {
			t.Fatalf("validating = %v, %v; want errValidationCPU after >= %v", cpu, err, left)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("stopped after %v, for a budget of %v", took, left)
		}
	})
}
