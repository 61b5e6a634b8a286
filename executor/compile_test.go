package executor_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// loopPhiBomb is the F16 compile bomb (gen_big.py's loopphi shape): a
// reactor whose function 0 has n i32 locals, each updated from two others
// inside depth nested loops.
func loopPhiBomb(n, depth int) []byte {
	uleb := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	section := func(b []byte, id byte, body []byte) []byte {
		return append(uleb(append(b, id), uint64(len(body))), body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = section(m, 1, []byte{2, 0x60, 0, 0, 0x60, 0, 1, 0x7f})
	m = section(m, 3, []byte{2, 0, 1})
	m = section(m, 5, []byte{1, 0, 1})
	m = section(m, 7, append(append(append([]byte{2, 6}, "memory"...), 2, 0, 6), append([]byte("handle"), 0, 1)...))
	body := append(uleb([]byte{1}, uint64(n)), 0x7f)
	for d := 0; d < depth; d++ {
		body = append(body, 0x03, 0x40)
	}
	for i := 0; i < n; i++ {
		body = uleb(append(body, 0x20), uint64((i+1)%n))
		body = uleb(append(body, 0x20), uint64((i*7)%n))
		body = uleb(append(body, 0x6a, 0x21), uint64(i))
	}
	for d := 0; d < depth; d++ {
		body = append(uleb(append(body, 0x20), uint64(d%n)), 0x0d, 0, 0x0b)
	}
	body = append(body, 0x0b)
	code := append(uleb([]byte{2}, uint64(len(body))), body...)
	code = append(code, 4, 0, 0x41, 0, 0x0b)
	return section(m, 10, code)
}

func bombManifest(id string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "version": "1.0.0", "description": "compile bomb",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
		"limits":          map[string]any{"memMB": 4, "cpuMs": 1000},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "bomb.wasm"},
	})
	return b
}

// TestF16CompileBomb: the red team's bombs (340 KB: 4 s, 1.1 MB: 56 s to
// compile) and the nested-loop variant (13 KB: 5 s) are refused at load in
// milliseconds with handler-shape-invalid naming the function and the
// limit; a module of the same family under the budget still loads.
func TestF16CompileBomb(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithCacheDir("") })
	for _, tc := range []struct {
		name     string
		n, depth int
		limit    string
	}{
		{"loopphi30k", 30000, 1, "values carried around loops"},
		{"loopphi90k", 90000, 1, "locals"},
		{"nested1kx500", 1000, 500, "values carried around loops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := loopPhiBomb(tc.n, tc.depth)
			start := time.Now()
			_, err := e.Load(context.Background(), bombManifest("redteam."+tc.name), executor.WithModule(bin))
			el := time.Since(start)
			te := wantCode(t, err, toolerr.HandlerShapeInvalid)
			t.Logf("%s (%d bytes) refused in %v: %s", tc.name, len(bin), el, te.Message)
			if !strings.Contains(te.Message, "function 0") || !strings.Contains(te.Message, tc.limit) {
				t.Errorf("message %q does not name function 0 and %q", te.Message, tc.limit)
			}
			if el > 2*time.Second {
				t.Errorf("refusal took %v", el)
			}
		})
	}
	start := time.Now()
	tool, err := e.Load(context.Background(), bombManifest("redteam.loopphi3k"), executor.WithModule(loopPhiBomb(3000, 1)))
	if err != nil {
		t.Fatalf("a module under the budget was refused: %v", err)
	}
	t.Logf("loopphi3k (under the budget) loaded in %v", time.Since(start))
	tool.Close(context.Background())
}

// TestLoadStopsWaitingForCompile: Load returns as soon as its context is
// cancelled, while the fuel pass runs (early cancel) and while wazero, whose
// compiler cannot be interrupted, compiles a large module (late cancel); the
// abandoned work finishes in the background.
func TestLoadStopsWaitingForCompile(t *testing.T) {
	for _, after := range []time.Duration{150 * time.Millisecond, 2500 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithCacheDir("") })
			ctx, cancel := context.WithCancel(context.Background())
			timer := time.AfterFunc(after, cancel)
			defer timer.Stop()
			start := time.Now()
			tool, err := e.Load(ctx, manifestFor(t, "http_fetch_reactor", nil))
			el := time.Since(start)
			if err == nil {
				tool.Close(context.Background())
				t.Skipf("the 10 MB Go guest loaded in %v, before the cancellation at %v", el, after)
			}
			wantCode(t, err, toolerr.Cancelled)
			t.Logf("cancelled at %v, Load returned at %v: %v", after, el, err)
			// The budget check and table rewrite before the pass are
			// synchronous (linear; ~1 s for 10 MB under -race, twice that
			// beside another test binary on 2 cores): 4 s of slack, still
			// far below the compilation it must not wait for (tens of
			// seconds under -race).
			if el > after+4*time.Second {
				t.Fatalf("Load returned %v after the cancellation", el-after)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v does not match context.Canceled", err)
			}
		})
	}
}
