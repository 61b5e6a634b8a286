// Package extism is the host side of an Extism plug-in's kernel memory.
//
// An Extism plug-in never passes data through its own linear memory: input,
// output, error text, config values, vars, HTTP bodies and log messages live
// in a second memory owned by the kernel (Extism's runtime runs a small Wasm
// module for it), reached through u64 offsets ("handles") and the load/store
// imports. sandboxd keeps that memory in Go: 64 KiB pages charged to the
// call's memory account (beside the guest's linear memory), every access
// bounds-checked (an access outside it is an error wrapping ErrOutOfBounds,
// which the caller turns into a trap of the call, never of the host).
//
// The layout is Extism's, so that PDK code sees the same handles: a 64-byte
// root at offset 1 (so no handle is 0), then blocks of a 12-byte header
// (status u8, size u32, used u32) and their data; the first allocation
// returns 77. Allocation bumps; a freed block is reused (first fit, split
// when more than splitMin bytes would be left) only when the bump region is
// exhausted, before the memory grows.
package extism

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/limits"
)

const (
	// Page is the unit the kernel memory grows by.
	Page = 64 << 10
	// MaxPages is the most pages a kernel holds: 4 GiB, the most a
	// u32-sized Extism kernel addresses.
	MaxPages = 65536
	// FirstBlock is the handle of the first block allocated after New or
	// Reset (the root, then a block header).
	FirstBlock = rootAt + rootSize + header // 77

	rootAt   = 1
	rootSize = 64
	header   = 12
	splitMin = 128
	// blockHostBytes is what the host holds per block besides its bytes
	// (its map entry and record), charged to the account with them: tiny
	// blocks must not let a guest make the host hold several times memMB.
	blockHostBytes = 64
	blockActive    = 1
	blockFree      = 2
)

// ErrOutOfBounds is wrapped by the error of every access outside kernel
// memory or past the input.
var ErrOutOfBounds = errors.New("extism: access outside kernel memory")

// boundsError is an access outside kernel memory, with its message.
type boundsError string

func (e boundsError) Error() string { return string(e) }

func (boundsError) Is(target error) bool { return target == ErrOutOfBounds }

func outOfBounds(format string, args ...any) error {
	return boundsError(fmt.Sprintf(format, args...))
}

// Kernel is one call's Extism kernel memory. It is used by one guest call at
// a time (host functions run on the guest's goroutine).
type Kernel struct {
	acct   *limits.Account
	pages  [][]byte
	pos    uint64            // next block header (bump position)
	blocks map[uint64]*block // by data offset
	freed  []uint64          // data offsets of free blocks, in freeing order

	// InputOff and InputLen are the input's range (input_set may point it
	// anywhere in kernel memory); OutputOff and OutputLen the output's
	// (output_set); ErrorOff the block error_set named (0: none).
	InputOff, InputLen   uint64
	OutputOff, OutputLen uint64
	ErrorOff             uint64
}

type block struct {
	size, used uint64
	active     bool
}

// New returns an empty kernel (no pages) charging acct.
func New(acct *limits.Account) *Kernel {
	return &Kernel{acct: acct, pos: rootAt + rootSize, blocks: map[uint64]*block{}}
}

// Size is the kernel memory's current size in bytes.
func (k *Kernel) Size() uint64 { return uint64(len(k.pages)) * Page }

// Grow adds pages until the memory holds end bytes; false when the account
// (memMB) or the 4 GiB cap refuses.
func (k *Kernel) Grow(end uint64) bool {
	if end <= k.Size() {
		return true
	}
	need := (end - k.Size() + Page - 1) / Page
	if uint64(len(k.pages))+need > MaxPages || !k.acct.Reserve(int64(need*Page)) {
		return false
	}
	for range need {
		k.pages = append(k.pages, make([]byte, Page))
	}
	return true
}

// Alloc allocates a block of n bytes and returns its data offset, or 0 for
// n == 0 and when the memory cannot grow (Extism's alloc returns 0 then).
func (k *Kernel) Alloc(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n > MaxPages*Page {
		k.acct.Reserve(int64(min(n, 1<<62))) // records the refusal for the error report
		return 0
	}
	if end := k.pos + header + n; end <= k.Size() {
		return k.bump(n)
	}
	if h := k.reuse(n); h != 0 {
		return h
	}
	if !k.Grow(k.pos + header + n) {
		return 0
	}
	return k.bump(n)
}

// record charges the host's record of one more block; false when memMB
// refuses.
func (k *Kernel) record() bool { return k.acct.Reserve(blockHostBytes) }

func (k *Kernel) bump(n uint64) uint64 {
	if !k.record() {
		return 0
	}
	h := k.pos + header
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
func (k *Kernel) reuse(n uint64) uint64 {
	for i, h := range k.freed[:min(len(k.freed), maxReuseScan)] {
		b := k.blocks[h]
		if b == nil || b.active || b.size < n {
			continue
		}
		k.freed = append(k.freed[:i], k.freed[i+1:]...)
		if rest := b.size - n; rest > splitMin+header && k.record() {
			b.size = n
			nh := h + n + header
			k.blocks[nh] = &block{size: rest - header}
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
func (k *Kernel) writeHeader(h uint64) {
	b := k.blocks[h]
	var hdr [header]byte
	hdr[0] = blockFree
	if b.active {
		hdr[0] = blockActive
	}
	binary.LittleEndian.PutUint32(hdr[4:], uint32(b.size))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(b.used))
	k.write(h-header, hdr[:])
}

// Free marks the block at h free; 0 and unknown handles are ignored.
// Freeing the input block empties the input.
func (k *Kernel) Free(h uint64) {
	b := k.blocks[h]
	if b == nil || !b.active {
		return
	}
	b.active, b.used = false, 0
	k.writeHeader(h)
	k.freed = append(k.freed, h)
	if h == k.InputOff {
		k.InputLen = 0
	}
}

// Length is the used length of the active block whose data starts at h, 0
// for anything else.
func (k *Kernel) Length(h uint64) uint64 {
	if b := k.blocks[h]; b != nil && b.active {
		return b.used
	}
	return 0
}

// InBounds reports whether [off, off+n) lies in kernel memory.
func (k *Kernel) InBounds(off, n uint64) bool {
	end := off + n
	return end >= off && end <= k.Size()
}

// Read copies [off, off+n) out of kernel memory; the caller checked bounds.
func (k *Kernel) Read(off, n uint64) []byte {
	out := make([]byte, n)
	k.copyOut(out, off)
	return out
}

func (k *Kernel) copyOut(dst []byte, off uint64) {
	for len(dst) > 0 {
		p, o := off/Page, off%Page
		c := copy(dst, k.pages[p][o:])
		dst, off = dst[c:], off+uint64(c)
	}
}

// write copies b into kernel memory at off; the caller checked bounds.
func (k *Kernel) write(off uint64, b []byte) {
	for len(b) > 0 {
		p, o := off/Page, off%Page
		c := copy(k.pages[p][o:], b)
		b, off = b[c:], off+uint64(c)
	}
}

// LoadU8 reads the byte at off.
func (k *Kernel) LoadU8(off uint64) (uint8, error) {
	if !k.InBounds(off, 1) {
		return 0, outOfBounds("extism: load_u8 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	return k.pages[off/Page][off%Page], nil
}

// LoadU64 reads the little-endian u64 at off.
func (k *Kernel) LoadU64(off uint64) (uint64, error) {
	if !k.InBounds(off, 8) {
		return 0, outOfBounds("extism: load_u64 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	var b [8]byte
	k.copyOut(b[:], off)
	return binary.LittleEndian.Uint64(b[:]), nil
}

// StoreU8 writes v at off.
func (k *Kernel) StoreU8(off uint64, v uint8) error {
	if !k.InBounds(off, 1) {
		return outOfBounds("extism: store_u8 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	k.pages[off/Page][off%Page] = v
	return nil
}

// StoreU64 writes v at off, little-endian.
func (k *Kernel) StoreU64(off, v uint64) error {
	if !k.InBounds(off, 8) {
		return outOfBounds("extism: store_u64 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	k.write(off, b[:])
	return nil
}

// InputU8 and InputU64 read at an offset relative to the input.
func (k *Kernel) InputU8(i uint64) (uint8, error) {
	if i >= k.InputLen {
		return 0, outOfBounds("extism: input_load_u8 at %d is past the input (%d bytes)", i, k.InputLen)
	}
	return k.LoadU8(k.InputOff + i)
}

// InputU64 reads the little-endian u64 at offset i of the input.
func (k *Kernel) InputU64(i uint64) (uint64, error) {
	if i+8 < i || i+8 > k.InputLen {
		return 0, outOfBounds("extism: input_load_u64 at %d is past the input (%d bytes)", i, k.InputLen)
	}
	return k.LoadU64(k.InputOff + i)
}

// SetInput puts b into a new block and makes it the input; false when it
// does not fit in the account.
func (k *Kernel) SetInput(b []byte) bool {
	h := k.Alloc(uint64(len(b)))
	if h == 0 && len(b) > 0 {
		return false
	}
	k.write(h, b)
	k.InputOff, k.InputLen = h, uint64(len(b))
	return true
}

// Reset clears every block and the input, output and error, as Extism's
// reset does; the pages stay (zeroed). It returns the bytes it cleared.
func (k *Kernel) Reset() uint64 {
	used := k.Size() // a guest may have stored anywhere in kernel memory
	for _, p := range k.pages {
		clear(p)
	}
	k.pos = rootAt + rootSize
	k.acct.Release(int64(len(k.blocks)) * blockHostBytes)
	clear(k.blocks)
	k.freed = k.freed[:0]
	k.InputOff, k.InputLen, k.OutputOff, k.OutputLen, k.ErrorOff = 0, 0, 0, 0, 0
	return used
}

// MemoryBytes is the length the kernel reports (its memory after the root).
func (k *Kernel) MemoryBytes() uint64 {
	if s := k.Size(); s > rootSize {
		return s - rootSize
	}
	return 0
}

// BlockBytes copies the used bytes of the block at h, at most max of them.
func (k *Kernel) BlockBytes(h uint64, max uint64) []byte {
	n := min(k.Length(h), max)
	if n == 0 {
		return nil
	}
	return k.Read(h, n)
}

// NewBlock allocates a block holding b and returns its handle (0 for an
// empty b); ok is false when it does not fit.
func (k *Kernel) NewBlock(b []byte) (h uint64, ok bool) {
	if len(b) == 0 {
		return 0, true
	}
	if h = k.Alloc(uint64(len(b))); h == 0 {
		return 0, false
	}
	k.write(h, b)
	return h, true
}

func (k *Kernel) String() string {
	return fmt.Sprintf("kernel{%d pages, pos %d, %d blocks}", len(k.pages), k.pos, len(k.blocks))
}
