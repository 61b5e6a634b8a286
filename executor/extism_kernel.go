package executor

import (
	"encoding/binary"
	"fmt"

	"github.com/sandboxd/sandboxd/limits"
)

// The Extism kernel, host-side. An Extism plug-in never passes data through
// its own linear memory: input, output, error text, config values, vars,
// HTTP bodies and log messages live in a second memory owned by the kernel
// (Extism's runtime runs a small Wasm module for it), reached through u64
// offsets ("handles") and the load/store imports. sandboxd keeps that memory
// in Go: 64 KiB pages charged to the call's memMB account (beside the
// guest's linear memory), every access bounds-checked (an access outside it
// traps the call, never the host).
//
// The layout is Extism's, so that PDK code sees the same handles: a 64-byte
// root at offset 1 (so no handle is 0), then blocks of a 12-byte header
// (status u8, size u32, used u32) and their data; the first allocation
// returns 77. Allocation bumps; a freed block is reused (first fit, split
// when more than kernelSplitMin bytes would be left) only when the bump
// region is exhausted, before the memory grows. A call starts with a fresh
// kernel holding its input, as Extism's hosts reset the kernel before every
// call: nothing in kernel memory survives a call.
const (
	kernelPage     = 64 << 10
	kernelRootAt   = 1
	kernelRootSize = 64
	kernelHeader   = 12
	kernelSplitMin = 128
	kernelMaxPages = 65536 // 4 GiB: the most a u32-sized Extism kernel addresses
	// blockHostBytes is what the host holds per block besides its bytes
	// (its map entry and record), charged to memMB with them: tiny blocks
	// must not let a guest make the host hold several times memMB.
	blockHostBytes  = 64
	blockActive     = 1
	blockFree       = 2
	kernelFirstData = kernelRootAt + kernelRootSize + kernelHeader // 77
)

// kernel is one call's Extism kernel memory. It is used by one guest call at
// a time (host functions run on the guest's goroutine).
type kernel struct {
	acct   *limits.Account
	pages  [][]byte
	pos    uint64            // next block header (bump position)
	blocks map[uint64]*block // by data offset
	freed  []uint64          // data offsets of free blocks, in freeing order

	inputOff, inputLen   uint64
	outputOff, outputLen uint64
	errorOff             uint64
}

type block struct {
	size, used uint64
	active     bool
}

func newKernel(acct *limits.Account) *kernel {
	return &kernel{acct: acct, pos: kernelRootAt + kernelRootSize, blocks: map[uint64]*block{}}
}

// size is the kernel memory's current size in bytes.
func (k *kernel) size() uint64 { return uint64(len(k.pages)) * kernelPage }

// grow adds pages until the memory holds end bytes; false when the account
// (memMB) or the 4 GiB cap refuses.
func (k *kernel) grow(end uint64) bool {
	if end <= k.size() {
		return true
	}
	need := (end - k.size() + kernelPage - 1) / kernelPage
	if uint64(len(k.pages))+need > kernelMaxPages || !k.acct.Reserve(int64(need*kernelPage)) {
		return false
	}
	for range need {
		k.pages = append(k.pages, make([]byte, kernelPage))
	}
	return true
}

// alloc allocates a block of n bytes and returns its data offset, or 0 for
// n == 0 and when the memory cannot grow (Extism's alloc returns 0 then).
func (k *kernel) alloc(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n > kernelMaxPages*kernelPage {
		k.acct.Reserve(int64(min(n, 1<<62))) // records the refusal for the error report
		return 0
	}
	if end := k.pos + kernelHeader + n; end <= k.size() {
		return k.bump(n)
	}
	if h := k.reuse(n); h != 0 {
		return h
	}
	if !k.grow(k.pos + kernelHeader + n) {
		return 0
	}
	return k.bump(n)
}

// record charges the host's record of one more block; false when memMB
// refuses.
func (k *kernel) record() bool { return k.acct.Reserve(blockHostBytes) }

func (k *kernel) bump(n uint64) uint64 {
	if !k.record() {
		return 0
	}
	h := k.pos + kernelHeader
	k.blocks[h] = &block{size: n, used: n, active: true}
	k.writeHeader(h)
	k.pos = h + n
	return h
}

// maxReuseScan bounds how many free blocks one alloc looks at, so that a
// guest that freed many blocks cannot make every allocation walk them all
// (host work no fuel pays for); past it the memory grows.
const maxReuseScan = 256

// reuse takes the first free block of at least n bytes among the first
// maxReuseScan, splitting it when enough would be left over.
func (k *kernel) reuse(n uint64) uint64 {
	for i, h := range k.freed[:min(len(k.freed), maxReuseScan)] {
		b := k.blocks[h]
		if b == nil || b.active || b.size < n {
			continue
		}
		k.freed = append(k.freed[:i], k.freed[i+1:]...)
		if rest := b.size - n; rest > kernelSplitMin+kernelHeader && k.record() {
			b.size = n
			nh := h + n + kernelHeader
			k.blocks[nh] = &block{size: rest - kernelHeader}
			k.writeHeader(nh)
			k.freed = append(k.freed, nh)
		}
		b.used, b.active = n, true
		k.writeHeader(h)
		return h
	}
	return 0
}

// writeHeader mirrors a block's header into memory, where Extism keeps it.
func (k *kernel) writeHeader(h uint64) {
	b := k.blocks[h]
	var hdr [kernelHeader]byte
	hdr[0] = blockFree
	if b.active {
		hdr[0] = blockActive
	}
	binary.LittleEndian.PutUint32(hdr[4:], uint32(b.size))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(b.used))
	k.write(h-kernelHeader, hdr[:])
}

// free marks the block at h free; 0 and unknown handles are ignored.
// Freeing the input block empties the input.
func (k *kernel) free(h uint64) {
	b := k.blocks[h]
	if b == nil || !b.active {
		return
	}
	b.active, b.used = false, 0
	k.writeHeader(h)
	k.freed = append(k.freed, h)
	if h == k.inputOff {
		k.inputLen = 0
	}
}

// length is the used length of the active block whose data starts at h, 0
// for anything else.
func (k *kernel) length(h uint64) uint64 {
	if b := k.blocks[h]; b != nil && b.active {
		return b.used
	}
	return 0
}

// inBounds reports whether [off, off+n) lies in kernel memory.
func (k *kernel) inBounds(off, n uint64) bool {
	end := off + n
	return end >= off && end <= k.size()
}

// read copies [off, off+n) out of kernel memory; the caller checked bounds.
func (k *kernel) read(off, n uint64) []byte {
	out := make([]byte, n)
	k.copyOut(out, off)
	return out
}

func (k *kernel) copyOut(dst []byte, off uint64) {
	for len(dst) > 0 {
		p, o := off/kernelPage, off%kernelPage
		c := copy(dst, k.pages[p][o:])
		dst, off = dst[c:], off+uint64(c)
	}
}

// write copies b into kernel memory at off; the caller checked bounds.
func (k *kernel) write(off uint64, b []byte) {
	for len(b) > 0 {
		p, o := off/kernelPage, off%kernelPage
		c := copy(k.pages[p][o:], b)
		b, off = b[c:], off+uint64(c)
	}
}

func (k *kernel) loadU8(off uint64) uint8 {
	if !k.inBounds(off, 1) {
		trapf("extism: load_u8 at %d is outside kernel memory (%d bytes)", off, k.size())
	}
	return k.pages[off/kernelPage][off%kernelPage]
}

func (k *kernel) loadU64(off uint64) uint64 {
	if !k.inBounds(off, 8) {
		trapf("extism: load_u64 at %d is outside kernel memory (%d bytes)", off, k.size())
	}
	var b [8]byte
	k.copyOut(b[:], off)
	return binary.LittleEndian.Uint64(b[:])
}

func (k *kernel) storeU8(off uint64, v uint8) {
	if !k.inBounds(off, 1) {
		trapf("extism: store_u8 at %d is outside kernel memory (%d bytes)", off, k.size())
	}
	k.pages[off/kernelPage][off%kernelPage] = v
}

func (k *kernel) storeU64(off, v uint64) {
	if !k.inBounds(off, 8) {
		trapf("extism: store_u64 at %d is outside kernel memory (%d bytes)", off, k.size())
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	k.write(off, b[:])
}

// inputByte and inputU64 read at an offset relative to the input.
func (k *kernel) inputByte(i uint64) uint8 {
	if i >= k.inputLen {
		trapf("extism: input_load_u8 at %d is past the input (%d bytes)", i, k.inputLen)
	}
	return k.loadU8(k.inputOff + i)
}

func (k *kernel) inputU64(i uint64) uint64 {
	if i+8 < i || i+8 > k.inputLen {
		trapf("extism: input_load_u64 at %d is past the input (%d bytes)", i, k.inputLen)
	}
	return k.loadU64(k.inputOff + i)
}

// setInput puts b into a new block and makes it the input; false when it
// does not fit in memMB.
func (k *kernel) setInput(b []byte) bool {
	h := k.alloc(uint64(len(b)))
	if h == 0 && len(b) > 0 {
		return false
	}
	k.write(h, b)
	k.inputOff, k.inputLen = h, uint64(len(b))
	return true
}

// reset clears every block and the input, output and error, as Extism's
// reset does; the pages stay (zeroed). It returns the bytes it cleared.
func (k *kernel) reset() uint64 {
	used := k.size() // a guest may have stored anywhere in kernel memory
	for _, p := range k.pages {
		clear(p)
	}
	k.pos = kernelRootAt + kernelRootSize
	k.acct.Release(int64(len(k.blocks)) * blockHostBytes)
	clear(k.blocks)
	k.freed = k.freed[:0]
	k.inputOff, k.inputLen, k.outputOff, k.outputLen, k.errorOff = 0, 0, 0, 0, 0
	return used
}

// memoryBytes is the length the kernel reports (its memory after the root).
func (k *kernel) memoryBytes() uint64 {
	if s := k.size(); s > kernelRootSize {
		return s - kernelRootSize
	}
	return 0
}

// blockBytes copies the used bytes of the block at h, at most max of them.
func (k *kernel) blockBytes(h uint64, max uint64) []byte {
	n := min(k.length(h), max)
	if n == 0 {
		return nil
	}
	return k.read(h, n)
}

// newBlock allocates a block holding b and returns its handle (0 for an
// empty b); ok is false when it does not fit.
func (k *kernel) newBlock(b []byte) (h uint64, ok bool) {
	if len(b) == 0 {
		return 0, true
	}
	if h = k.alloc(uint64(len(b))); h == 0 {
		return 0, false
	}
	k.write(h, b)
	return h, true
}

func (k *kernel) String() string {
	return fmt.Sprintf("kernel{%d pages, pos %d, %d blocks}", len(k.pages), k.pos, len(k.blocks))
}
