package extism_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/extism"
	"github.com/sandboxd/sandboxd/limits"
)

func newKernel(t *testing.T, limit int64) *extism.Kernel {
	t.Helper()
	k := extism.New(limits.NewAccount(limit), nil)
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

// countingMeter records the kernel's charges; it panics (as fuel.Charge
// does when a call is interrupted) once stopAfter charges were made, when
// stopAfter > 0.
type countingMeter struct {
	calls, bytes, maxN uint64
	stopAfter          uint64
}

type stopped struct{}

func (m *countingMeter) charge(n uint64) {
	if m.stopAfter > 0 && m.calls >= m.stopAfter {
		panic(stopped{})
	}
	m.calls++
	m.bytes += n
	m.maxN = max(m.maxN, n)
}

// G04: memory the guest never wrote is never touched. A 1 GiB allocation
// costs a header write (one page allocated), a reset after it clears only
// that page, and reads of the rest are zeros that allocate nothing.
func TestG04KernelTouchesOnlyWrittenPages(t *testing.T) {
	m := &countingMeter{}
	k := extism.New(limits.NewAccount(2<<30), m.charge)
	h := k.Alloc(1 << 30)
	if h == 0 {
		t.Fatal("alloc of 1 GiB failed")
	}
	if m.bytes > extism.Page {
		t.Fatalf("alloc of 1 GiB charged %d bytes of work, want at most one page", m.bytes)
	}
	for off := h; off < h+1<<30; off += 1 << 24 {
		if v, err := k.LoadU64(off); err != nil || v != 0 {
			t.Fatalf("load at %d: %d %v", off, v, err)
		}
	}
	for range 1000 {
		m.bytes = 0
		k.Reset()
		if m.bytes > extism.Page {
			t.Fatalf("reset charged %d bytes, want at most one page (the only one written)", m.bytes)
		}
		if h = k.Alloc(1 << 30); h == 0 {
			t.Fatal("alloc after reset failed")
		}
	}
	if s := k.String(); !strings.Contains(s, "(1 dirty)") {
		t.Fatalf("after 1000 alloc/reset rounds: %s", s)
	}
}

// Bulk work is charged a chunk at a time before it is done, and a meter that
// stops the call mid-way leaves a kernel that a later Reset finishes: every
// page written reads zero again.
func TestG04KernelChunkedAndStoppable(t *testing.T) {
	m := &countingMeter{}
	k := extism.New(limits.NewAccount(64<<20), m.charge)
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i%251) + 1
	}
	h, ok := k.NewBlock(data)
	if !ok {
		t.Fatal("NewBlock failed")
	}
	if m.maxN > extism.Chunk || m.bytes < uint64(len(data)) {
		t.Fatalf("NewBlock of 8 MiB: %d charges, largest %d, total %d", m.calls, m.maxN, m.bytes)
	}
	if got := k.Read(h, uint64(len(data))); string(got) != string(data) {
		t.Fatal("Read returned other bytes")
	}
	m.stopAfter = m.calls + 10
	func() {
		defer func() {
			if _, ok := recover().(stopped); !ok {
				t.Fatal("Reset did not stop at the meter's panic")
			}
		}()
		k.Reset()
	}()
	if k.Length(h) != 0 || k.InputLen != 0 {
		t.Fatal("a stopped Reset kept its records")
	}
	m.stopAfter = 0
	k.Reset()
	for off := h; off < h+uint64(len(data)); off += 4093 {
		if v, _ := k.LoadU8(off); v != 0 {
			t.Fatalf("byte %d = %d after the finished reset", off, v)
		}
	}
}

// Alloc/free churn costs the same per call however many blocks were freed:
// reuse shifts only the entries it scanned, and a Reset after a million
// blocks replaces their map rather than clearing it.
func TestG04KernelChurn(t *testing.T) {
	k := extism.New(limits.NewAccount(1<<30), nil)
	const n = 1 << 20
	hs := make([]uint64, 0, n)
	for range n {
		h := k.Alloc(16)
		if h == 0 {
			t.Fatal("alloc failed")
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		k.Free(h)
	}
	// The bump region is exhausted only at the memory's end: fill it, so
	// allocations reuse freed blocks.
	rest := k.Size() - (hs[len(hs)-1] + 16) - 12
	if k.Alloc(rest) == 0 {
		t.Fatal("filling the last page failed")
	}
	for i := range 1000 {
		if h := k.Alloc(16); h != hs[i] {
			t.Fatalf("alloc %d reused %d, want the %d-th freed block %d", i, h, i, hs[i])
		}
	}
	k.Reset()
	if h := k.Alloc(1); h != extism.FirstBlock {
		t.Fatalf("first block after reset %d", h)
	}
}

// The free list does not grow with alloc/free pairs over a long-lived list:
// the entries reuse took are dropped.
func TestKernelFreeListBounded(t *testing.T) {
	k := extism.New(limits.NewAccount(1<<30), nil)
	var hs []uint64
	for range 10000 {
		hs = append(hs, k.Alloc(16))
	}
	for _, h := range hs {
		k.Free(h)
	}
	if k.Alloc(k.Size()-(hs[len(hs)-1]+16)-12) == 0 {
		t.Fatal("filling the last page failed")
	}
	size := k.Size()
	for range 1_000_000 {
		a, b := k.Alloc(16), k.Alloc(16)
		if a == 0 || b == 0 {
			t.Fatal("alloc failed")
		}
		k.Free(a)
		k.Free(b)
	}
	if k.Size() != size {
		t.Fatalf("the memory grew from %d to %d bytes: freed blocks were not reused", size, k.Size())
	}
	s := k.String()
	var list int
	if i := strings.Index(s, "(list "); i < 0 || !strings.Contains(s, "10000 free") {
		t.Fatalf("%s: want 10000 free entries", s)
	} else if _, err := fmt.Sscanf(s[i:], "(list %d)", &list); err != nil || list > 4*10000 {
		t.Fatalf("%s: the free list holds %d entries for 10000 free blocks (%v)", s, list, err)
	}
}

// Read (the Extism output's copy, among others) copies a chunk at a time,
// each charged before it is copied, into memory it did not clear: what it
// returns is exactly the range, written pages and never-written ones
// (zeros) alike, at any offset; a meter that stops it mid-way leaves
// nothing behind.
func TestKernelReadChunkedExact(t *testing.T) {
	m := &countingMeter{}
	k := extism.New(limits.NewAccount(64<<20), m.charge)
	if !k.Grow(16 << 20) {
		t.Fatal("Grow failed")
	}
	// Garbage in the heap that an uncleared buffer could show: Read must
	// overwrite every byte.
	for range 4 {
		junk := make([]byte, 12<<20)
		for i := range junk {
			junk[i] = 0xee
		}
		_ = junk
	}
	runtime.GC() // the junk's spans are free for Read's buffer
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(i%253) + 1
	}
	const at = 5<<20 + 777 // written pages between never-written ones
	for i := 0; i < len(data); i += 8 {
		var v uint64
		for j := 7; j >= 0; j-- {
			v <<= 8
			if i+j < len(data) {
				v |= uint64(data[i+j])
			}
		}
		if i+8 <= len(data) {
			if err := k.StoreU64(uint64(at+i), v); err != nil {
				t.Fatal(err)
			}
		} else {
			for j := i; j < len(data); j++ {
				if err := k.StoreU8(uint64(at+j), data[j]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	want := make([]byte, 12<<20)
	copy(want[at-(1<<20):], data)
	m.calls, m.bytes, m.maxN = 0, 0, 0
	got := k.Read(1<<20, uint64(len(want)))
	if string(got) != string(want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("Read differs at byte %d of %d", i, len(want))
	}
	if m.maxN > extism.Chunk || m.bytes != uint64(len(want)) || m.calls < uint64(len(want))/extism.Chunk {
		t.Fatalf("Read of %d bytes: %d charges, largest %d, total %d", len(want), m.calls, m.maxN, m.bytes)
	}
	if len(k.Read(3, 0)) != 0 || k.Read(3, 0) == nil {
		t.Fatal("an empty Read is not an empty slice")
	}
	m.stopAfter = m.calls + 5
	func() {
		defer func() {
			if _, ok := recover().(stopped); !ok {
				t.Fatal("Read did not stop at the meter's panic")
			}
		}()
		k.Read(0, 8<<20)
		t.Fatal("a stopped Read returned")
	}()
}

// Renew empties a kernel for the next call of its instance: no pages, no
// blocks, nothing of what the last call wrote readable anywhere (its first
// page kept but cleared, the rest dropped), reservations in the new
// account; and a renewed kernel's first page costs no allocation.
func TestKernelRenew(t *testing.T) {
	old := limits.NewAccount(1 << 20)
	k := extism.New(old, nil)
	if !k.Grow(3*extism.Page) || !k.SetInput([]byte(strings.Repeat("secret", 100))) {
		t.Fatal("setup")
	}
	for _, off := range []uint64{extism.Page - 1, extism.Page + 5, 2*extism.Page + 9} {
		if err := k.StoreU8(off, 0xAA); err != nil {
			t.Fatal(err)
		}
	}
	k.Alloc(100)

	acct := limits.NewAccount(1 << 20)
	k.Renew(acct)
	if k.Size() != 0 || k.InputLen != 0 || k.InputOff != 0 || k.Length(extism.FirstBlock) != 0 {
		t.Fatalf("renewed: size %d, input [%d, +%d), first block %d bytes", k.Size(), k.InputOff, k.InputLen, k.Length(extism.FirstBlock))
	}
	if !k.Grow(3*extism.Page) || acct.Peak() < 3*extism.Page {
		t.Fatalf("grow after Renew: peak %d in the new account", acct.Peak())
	}
	// The kept page goes to the first page written, whichever it is: every
	// byte of every page reads zero, the kept one included.
	if err := k.StoreU8(2*extism.Page, 1); err != nil {
		t.Fatal(err)
	}
	for p := uint64(0); p < 3; p++ {
		b := k.Read(p*extism.Page, extism.Page)
		for i, c := range b {
			if c != 0 && (p != 2 || i != 0) {
				t.Fatalf("page %d byte %d is %#x after Renew", p, i, c)
			}
		}
	}
	if h := k.Alloc(10); h != extism.FirstBlock {
		t.Fatalf("first block after Renew at %d, want %d", h, extism.FirstBlock)
	}

	in := []byte(strings.Repeat("x", 1024))
	allocs := testing.AllocsPerRun(100, func() {
		k.Renew(acct)
		acct.Reset()
		if !k.Grow(extism.Page) || !k.SetInput(in) {
			t.Fatal("input after Renew")
		}
	})
	if allocs != 0 {
		t.Fatalf("Renew + a 1 KiB input: %.1f allocations, want 0 (the kept page reused)", allocs)
	}
}

// TestKernelIdle: a kernel emptied between calls (Idle) holds a page and
// small tables however large its last call was — not that call's pages,
// block records or free list — and the kept page reads zero; the next
// call's Renew finds it ready.
func TestKernelIdle(t *testing.T) {
	acct := limits.NewAccount(64 << 20)
	k := extism.New(acct, nil)
	const pages = 200 // 12.5 MiB
	if !k.Grow(pages*extism.Page) || !k.SetInput([]byte("secret")) {
		t.Fatal("setup")
	}
	for p := uint64(0); p < pages; p++ {
		if err := k.StoreU8(p*extism.Page+7, 0xAA); err != nil {
			t.Fatal(err)
		}
	}
	var hs []uint64
	for i := 0; i < 3000; i++ {
		h := k.Alloc(16)
		if h == 0 {
			t.Fatal("alloc")
		}
		hs = append(hs, h)
	}
	for _, h := range hs[:2000] {
		k.Free(h)
	}
	busy := k.HeldBytes()
	if busy < pages*extism.Page {
		t.Fatalf("a kernel with %d pages written holds %d bytes by HeldBytes", pages, busy)
	}
	k.Idle()
	idle := k.HeldBytes()
	if idle > extism.Page+8<<10 {
		t.Fatalf("idle kernel holds %d bytes (%d before Idle), want its kept page and a few KiB at most", idle, busy)
	}
	if k.Size() != 0 || k.InputLen != 0 {
		t.Fatalf("idle kernel: size %d, input %d bytes", k.Size(), k.InputLen)
	}
	acct.Reset()
	k.Renew(acct)
	if !k.Grow(extism.Page) {
		t.Fatal("grow after Idle")
	}
	for i, c := range k.Read(0, extism.Page) {
		if c != 0 {
			t.Fatalf("byte %d of the kept page is %#x after Idle", i, c)
		}
	}
	if h := k.Alloc(10); h != extism.FirstBlock {
		t.Fatalf("first block after Idle at %d, want %d", h, extism.FirstBlock)
	}
	// A call after Idle reuses the kept page: Idle, then the next call's
	// Renew and input, allocate nothing.
	in := []byte(strings.Repeat("x", 1024))
	allocs := testing.AllocsPerRun(100, func() {
		k.Idle()
		acct.Reset()
		k.Renew(acct)
		if !k.Grow(extism.Page) || !k.SetInput(in) {
			t.Fatal("input after Idle")
		}
	})
	if allocs != 0 {
		t.Fatalf("Idle, Renew and a 1 KiB input: %.1f allocations, want 0 (the kept page reused)", allocs)
	}
}
