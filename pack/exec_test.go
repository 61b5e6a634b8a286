package pack_test

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

var (
	cacheOnce sync.Once
	cacheDir  string
)

func newExecutor(t testing.TB, cfg executor.Config) *executor.Executor {
	t.Helper()
	cacheOnce.Do(func() {
		cacheDir, _ = os.MkdirTemp("", "sandboxd-pack-test-cache-")
	})
	exec, err := executor.New(context.Background(), cfg.WithCacheDir(cacheDir).WithGuestOutput(io.Discard, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Close(context.Background()) })
	return exec
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cacheDir != "" {
		os.RemoveAll(cacheDir)
	}
	os.Exit(code)
}
