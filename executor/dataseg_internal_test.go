package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

// Load makes the data segments of a metered reactor passive and records
// the init export newInstance calls; a command's (its instance runs _start
// as soon as it exists) and a module with a data count section keep theirs.
func TestDataInitSetAtLoad(t *testing.T) {
	e, err := New(context.Background(), NewConfig().WithDevMode(true).WithCacheDir(t.TempDir()).WithGuestOutput(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	for _, tc := range []struct {
		fixture, want string
	}{
		{"go_echo_reactor", wasmbin.DataInitExport},
		{"counter", wasmbin.DataInitExport},
		{"go_echo_command", ""},
		{"exit_error_command", ""},
		{"xtenant_wat", ""},  // has a data count section
		{"echo_reactor", ""}, // has no data
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			p, err := filepath.Abs(filepath.Join("..", "testdata", "wasm", tc.fixture+".wasm"))
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if testing.Short() && fi.Size() > 1<<20 {
				t.Skip("-short: a standard-Go guest takes seconds to compile")
			}
			m, _ := json.Marshal(map[string]any{
				"id": "test.dataseg", "description": "d", "version": "1.0.0",
				"input": map[string]any{"type": "object"}, "output": map[string]any{},
				"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": p},
				"limits":          map[string]any{"memMB": 64, "cpuMs": 5000},
			})
			tool, err := e.Load(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			defer tool.Close(context.Background())
			c, ok := tool.h.(interface{ code() *wasmCode })
			if !ok {
				t.Fatalf("handler %T has no wasm code", tool.h)
			}
			if !c.code().metered {
				t.Fatal("not metered")
			}
			if got := c.code().dataInit; got != tc.want {
				t.Fatalf("dataInit = %q, want %q", got, tc.want)
			}
		})
	}
}
