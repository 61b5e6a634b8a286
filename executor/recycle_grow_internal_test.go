package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/sandboxd/sandboxd/internal/extism"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/limits"
)

// A recycled instance of an Extism plug-in whose memory grows in every
// call — go-sdk's Rust count_vowels (a page) and the Haskell PDK's hello
// (GHC's allocator, a megablock) — leaks nothing of the call it served:
// after the reset, its memory (size and every byte), its mutable globals
// and its dirty flag are the tool's saved post-initialisation state that
// every fresh instance is loaded from, and it holds no vars. Each call
// gets an input of a different length and content, so a byte of the
// previous call left anywhere shows.
func TestRecycledGrownPluginLeaksNothing(t *testing.T) {
	plugins := []struct {
		name, entry string
		wasm        func(t *testing.T) []byte
		output      map[string]any
	}{
		{"count_vowels.wasm (Rust PDK)", "count_vowels", func(t *testing.T) []byte {
			out, err := exec.Command("go", "env", "GOMODCACHE").Output()
			if err != nil {
				t.Skip(err)
			}
			b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "github.com", "extism", "go-sdk@v1.7.1", "wasm", "count_vowels.wasm"))
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			return b
		}, map[string]any{}},
		{"hello-from-haskell.wasm (Haskell PDK)", "hello", func(t *testing.T) []byte {
			b, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", "extism", "hello-from-haskell.wasm"))
			if err != nil {
				t.Fatal(err)
			}
			sandboxtest.SkipShort(t, "hello-from-haskell.wasm", int64(len(b)))
			return b
		}, map[string]any{"type": "string"}},
	}
	for _, pl := range plugins {
		t.Run(pl.name, func(t *testing.T) {
			ctx := context.Background()
			wasm := pl.wasm(t)
			e, err := New(ctx, NewConfig().WithDevMode(true).WithCacheDir(t.TempDir()).WithGuestOutput(nil, nil).WithPoolSize(1))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			m, _ := json.Marshal(map[string]any{
				"id": "test.grown", "description": "d", "version": "1.0.0", "sandbox": "context-isolated",
				"input": map[string]any{"type": "string"}, "output": pl.output,
				"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "plugin.wasm#" + pl.entry},
				"limits":          map[string]any{"memMB": 64, "cpuMs": 5000},
			})
			tool, err := e.Load(ctx, m, WithModule(wasm))
			if err != nil {
				t.Fatal(err)
			}
			defer tool.Close(ctx)
			rh := tool.h.(*reactorHandler)
			checked := 0
			for i := 0; i < 40 && checked < 6; i++ {
				input := strings.Repeat(string(rune('a'+i%26))+"é ", 1+(i*977)%20000) // up to 80 KB
				in, _ := json.Marshal(input)
				if _, err := tool.Invoke(ctx, Request{Input: in, Context: CallContext{TenantID: "t1", RunID: "r1"}}); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				// The refill goroutine resets the instance the call used and
				// returns it to the pool (slower under -race): wait up to a
				// second for it, closing the never-used ones the pool makes
				// meanwhile.
				for wait := time.Now().Add(time.Second); time.Now().Before(wait); {
					ins := rh.takeInstance(needsKey{})
					if ins == nil {
						time.Sleep(time.Millisecond)
						continue
					}
					recycled := ins.recycled > 0
					if recycled {
						checkFresh(t, i, ins)
						checked++
					}
					_ = ins.mod.Close(ctx) // the pool makes another
					if recycled {
						break
					}
				}
			}
			t.Logf("%d recycled instances checked; %+v", checked, tool.Stats())
			if checked < 3 {
				t.Fatalf("only %d recycled instances to check in 40 calls (stats %+v)", checked, tool.Stats())
			}
		})
	}
}

// checkFresh fails t unless the recycled instance in is in its saved state.
func checkFresh(t *testing.T, call int, in *instance) {
	t.Helper()
	s := in.snap
	st := s.st
	if in.vars != nil {
		t.Fatalf("call %d: the recycled instance still holds the call's vars", call)
	}
	if s.dirty.Get() != 0 {
		t.Fatalf("call %d: dirty flag %d", call, s.dirty.Get())
	}
	// The kernel keeps a page for the next call, cleared, and none of the
	// last call's pages or records (Kernel.Idle).
	if k := in.kernel; k != nil && (k.Size() != 0 || k.HeldBytes() > extism.Page+8<<10) {
		t.Fatalf("call %d: the recycled instance's kernel is %d bytes and holds %d", call, k.Size(), k.HeldBytes())
	}
	for i, g := range s.globals {
		if g.Get() != st.values[i] {
			t.Fatalf("call %d: global %d is %#x, saved %#x", call, i, g.Get(), st.values[i])
		}
	}
	mem := memoryOf(in.mod)
	if int(mem.Size()) != st.memSize || in.acct.Linear() != int64(st.memSize) {
		t.Fatalf("call %d: memory %d bytes (charged %d), saved %d", call, mem.Size(), in.acct.Linear(), st.memSize)
	}
	want := make([]byte, st.memSize)
	if st.img != nil {
		if !st.img.CopyTo(want) {
			t.Fatal("the image cannot be read")
		}
	} else {
		st.restore(want)
	}
	got, _ := mem.Read(0, mem.Size())
	if !bytes.Equal(got, want) {
		n := 0
		for i := range got {
			if got[i] != want[i] {
				n++
			}
		}
		t.Fatalf("call %d: %d bytes of memory differ from the saved state", call, n)
	}
	// Past the saved size, the memory reads as zeros when it grows again.
	if _, ok := mem.Grow(16); !ok {
		t.Fatal("the recycled memory cannot grow")
	}
	tail, _ := mem.Read(uint32(st.memSize), 16*65536)
	if !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatalf("call %d: the memory past the saved size is not all zeros after a reset", call)
	}
}

// otherMemory is an api.Memory that is not wazero's memory instance.
type otherMemory struct {
	api.Memory
	Buffer []byte
}

// shrink works through wazero's own memory type only: on wazero's it puts
// a grown memory back to its size (memory.size and the charge); on a
// memory type without wazero's fields, or a shared memory, it refuses and
// changes nothing (the caller closes the instance, as before shrink).
func TestShrinkWazeroMemoryOnly(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesThreads))
	defer r.Close(ctx)
	in := &instance{acct: limits.NewAccount(64 << 20)}
	for _, shared := range []bool{false, true} {
		mem := map[bool]string{false: "(memory (export \"memory\") 1 8)", true: "(memory (export \"memory\") 1 8 shared)"}[shared]
		bin := sandboxtest.WAT(t, "(module "+mem+")", "--enable-threads")
		in.acct = limits.NewAccount(64 << 20)
		mod, err := r.InstantiateModule(experimental.WithMemoryAllocator(ctx, in.acct.Allocator()), mustCompile(t, r, bin), wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		m := mod.Memory()
		if _, ok := m.Grow(3); !ok {
			t.Fatal("grow")
		}
		m.WriteByte(3*65536, 9)
		if got := in.shrink(m, 65536); got == shared || (!shared && (m.Size() != 65536 || in.acct.Linear() != 65536)) || (shared && m.Size() != 4*65536) {
			t.Fatalf("shared %v: shrink = %v, size %d, charged %d", shared, got, m.Size(), in.acct.Linear())
		}
		if !shared {
			if _, ok := m.Grow(3); !ok {
				t.Fatal("regrow")
			}
			if b, _ := m.ReadByte(3 * 65536); b != 0 {
				t.Fatal("the memory past the shrunk size did not read as zeros")
			}
		}
		_ = mod.Close(ctx)
	}
	if _, ok := memFields(&otherMemory{Buffer: make([]byte, 65536)}); ok {
		t.Fatal("memFields accepted a memory type that is not wazero's")
	}
}

func mustCompile(t *testing.T, r wazero.Runtime, bin []byte) wazero.CompiledModule {
	t.Helper()
	cm, err := r.CompileModule(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}
