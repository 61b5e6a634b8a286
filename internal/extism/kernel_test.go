package extism_test

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/internal/extism"
	"github.com/sandboxd/sandboxd/limits"
)

func newKernel(t *testing.T, limit int64) *extism.Kernel {
	t.Helper()
	k := extism.New(limits.NewAccount(limit))
	if !k.Grow(extism.Page) {
		t.Fatal("the first page does not fit")
	}
	return k
}

// Handles are Extism's: the first block is at 77 and a block's data follows
// its 12-byte header; accesses outside memory or past the input are
// ErrOutOfBounds errors, never panics.
func TestKernelLayoutAndBounds(t *testing.T) {
	k := newKernel(t, 1<<20)
	if !k.SetInput([]byte("abc")) || k.InputOff != extism.FirstBlock || k.InputLen != 3 {
		t.Fatalf("input at %d (%d bytes), want 77 (3)", k.InputOff, k.InputLen)
	}
	h := k.Alloc(5)
	if h != extism.FirstBlock+3+12 || k.Length(h) != 5 {
		t.Fatalf("second block %d length %d", h, k.Length(h))
	}
	if v, err := k.InputU8(1); err != nil || v != 'b' {
		t.Fatalf("input byte 1: %q %v", v, err)
	}
	for name, err := range map[string]error{
		"load_u8":   second(k.LoadU8(k.Size())),
		"load_u64":  second(k.LoadU64(k.Size() - 7)),
		"store_u8":  k.StoreU8(k.Size(), 1),
		"store_u64": k.StoreU64(1<<64-4, 1),
		"input_u8":  second(k.InputU8(3)),
		"input_u64": second(k.InputU64(1<<64 - 1)),
	} {
		if !errors.Is(err, extism.ErrOutOfBounds) {
			t.Errorf("%s: %v, want ErrOutOfBounds", name, err)
		}
	}
	if err := k.StoreU64(h, 0x0102030405060708); err != nil {
		t.Fatal(err)
	}
	if v, err := k.LoadU64(h); err != nil || v != 0x0102030405060708 {
		t.Fatalf("load_u64: %x %v", v, err)
	}
}

func second[T any](_ T, err error) error { return err }

// A freed block is reused only once the bump region is exhausted; Reset
// empties the kernel, so the next block is the first again and reads zero.
func TestKernelReuseAndReset(t *testing.T) {
	k := newKernel(t, 1<<20)
	a := k.Alloc(1000)
	k.Free(a)
	b := k.Alloc(1000)
	if b == a {
		t.Fatal("a freed block was reused before the bump region was exhausted")
	}
	big := k.Alloc(extism.Page - (b + 1000) - 12) // fills the rest of the page
	if big == 0 {
		t.Fatal("alloc within the page failed")
	}
	if c := k.Alloc(500); c != a {
		t.Fatalf("alloc after exhaustion = %d, want the freed block %d", c, a)
	}
	if err := k.StoreU8(a, 7); err != nil {
		t.Fatal(err)
	}
	k.Reset()
	if k.InputLen != 0 || k.Length(a) != 0 {
		t.Fatal("reset kept a block")
	}
	if h := k.Alloc(1); h != extism.FirstBlock {
		t.Fatalf("first block after reset %d", h)
	}
	if v, _ := k.LoadU8(a); v != 0 {
		t.Fatalf("byte %d after reset = %d", a, v)
	}
}

// Allocations past the account return 0 and leave the kernel usable.
func TestKernelAllocRefused(t *testing.T) {
	k := newKernel(t, 2*extism.Page)
	if h := k.Alloc(4 * extism.Page); h != 0 {
		t.Fatalf("alloc past the account = %d", h)
	}
	if h := k.Alloc(1 << 40); h != 0 {
		t.Fatalf("alloc past 4 GiB = %d", h)
	}
	if h := k.Alloc(10); h == 0 {
		t.Fatal("a small alloc failed after a refusal")
	}
}
