package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// fuelEntries returns the instrumented-module cache entries under dir.
func fuelEntries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "fuel", "v*-*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// privateExecutor is an executor with its own cache directory.
func privateExecutor(t *testing.T, dir string) *executor.Executor {
	t.Helper()
	e, err := executor.New(context.Background(), executor.NewConfig().WithDevMode(true).WithCacheDir(dir).WithGuestOutput(nil, nil).WithPoolSize(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// A cache entry of an instrumented module is checked on read: whatever
// replaced it (an unmetered spinner dressed up with the pass's exports, the
// raw module, a truncated entry, another module's valid entry, one flipped
// byte), the tool still runs its own module metered — the spinner under
// cpuMs 300 is stopped by its budget — and the entry is rewritten.
func TestFuelCacheTamper(t *testing.T) {
	spinner, err := os.ReadFile(fixture(t, "cache_spinner"))
	if err != nil {
		t.Fatal(err)
	}
	// A valid entry of another module, to copy over the loop's.
	otherDir := t.TempDir()
	load(t, privateExecutor(t, otherDir), "echo_reactor", nil)
	other := fuelEntries(t, otherDir)
	if len(other) != 1 {
		t.Fatalf("%d cache entries for echo_reactor, want 1", len(other))
	}
	otherEntry, err := os.ReadFile(other[0])
	if err != nil {
		t.Fatal(err)
	}

	cpuMs := 300
	if testing.Short() {
		cpuMs = 50 // each subtest's call spins to its budget
	}
	for name, tamper := range map[string]func(entry []byte) []byte{
		"spinner":     func([]byte) []byte { return spinner },
		"other entry": func([]byte) []byte { return otherEntry },
		"truncated":   func(b []byte) []byte { return b[:len(b)/2] },
		"flipped byte": func(b []byte) []byte {
			b = append([]byte(nil), b...)
			b[len(b)/2] ^= 0x40
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			load(t, privateExecutor(t, dir), "loop", withLimits(16, cpuMs))
			entries := fuelEntries(t, dir)
			if len(entries) != 1 {
				t.Fatalf("%d cache entries, want 1", len(entries))
			}
			orig, err := os.ReadFile(entries[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(entries[0], tamper(orig), 0o600); err != nil {
				t.Fatal(err)
			}
			tool := load(t, privateExecutor(t, dir), "loop", withLimits(16, cpuMs))
			if !tool.Stats().Metered {
				t.Fatal("the tool is not metered")
			}
			start := time.Now()
			_, err = invoke(t, tool, `{}`)
			te := wantCode(t, err, toolerr.LimitsExceeded)
			if te.Details["limit"] != string(toolerr.LimitCPUMs) {
				t.Fatalf("details %v, want limit cpuMs", te.Details)
			}
			t.Logf("stopped after %v", time.Since(start))
			if got, err := os.ReadFile(entries[0]); err != nil || string(got) != string(orig) {
				t.Fatalf("the tampered entry was not rewritten (%v)", err)
			}
		})
	}
}
