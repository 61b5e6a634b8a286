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
//
// Host work in proportion to a guest's request is done in chunks of at most
// Chunk bytes, each charged to the call's Meter before it is done, so that a
// call stops within one chunk of its interrupt; and memory is touched only
// where the guest wrote: a page is allocated on its first write (a page
// never written reads as zeros and costs nothing but its reservation in the
// account) and Reset clears only the pages written since they were last
// cleared. Growing the memory, allocating, freeing and resetting the block
// records cost the same whatever their size.
package extism

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/rawbuf"
	"github.com/sandboxd/sandboxd/limits"
)

const (
	// Page is the unit the kernel memory grows by.
	Page = 64 << 10
	// MaxPages is the most pages a kernel holds: 4 GiB, the most a
	// u32-sized Extism kernel addresses.
	MaxPages = 65536
	// Chunk is the most bytes the kernel copies, allocates or clears
	// between two calls of its Meter.
	Chunk = Page
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

// Meter is charged for the kernel's work before it is done: n bytes (at
// most Chunk) copied, allocated or cleared. It may panic to stop the call
// (fuel.Charge does when the call is interrupted or out of fuel); the panic
// leaves the kernel consistent, with the work not yet done undone.
type Meter func(n uint64)

// Kernel is one call's Extism kernel memory. It is used by one guest call at
// a time (host functions run on the guest's goroutine).
type Kernel struct {
	acct  *limits.Account
	meter Meter
	// pages is the memory, a page per entry; nil for a page never written
	// (it reads as zeros).
	pages [][]byte
	// dirty lists the pages written since they were last cleared (Reset
	// clears only those); isDirty is the same set as a bitmap.
	dirty   []uint32
	isDirty []uint64
	// ends holds, per page, the end of the bytes written in it since it was
	// last cleared (a page is cleared up to there, not whole).
	ends []uint32
	// spare is a cleared page buffer kept from a kernel Renew emptied: the
	// next page allocated takes it rather than a new one.
	spare  []byte
	pos    uint64           // next block header (bump position)
	blocks map[uint64]block // by data offset
	// peakBlocks is the most records blocks held since it was made: Reset
	// replaces a map that grew large rather than clearing it (clear costs
	// its capacity, not its length).
	peakBlocks int
	// freed holds the data offsets of free blocks, in freeing order, from
	// freedHead on (reuse takes from the first maxReuseScan of them and
	// shifts only those).
	freed     []uint64
	freedHead int

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

// New returns an empty kernel (no pages) reserving its memory in acct and
// charging its work to meter (nil: to nothing).
func New(acct *limits.Account, meter Meter) *Kernel {
	if meter == nil {
		meter = func(uint64) {}
	}
	return &Kernel{acct: acct, meter: meter, pos: rootAt + rootSize, blocks: map[uint64]block{}}
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
	// The pages are allocated on their first write (page): growing costs
	// a slice entry per page, whatever the size.
	k.pages = append(k.pages, make([][]byte, need)...)
	k.ends = append(k.ends, make([]uint32, need)...)
	if words := (len(k.pages) + 63) / 64; words > len(k.isDirty) {
		k.isDirty = append(k.isDirty, make([]uint64, words-len(k.isDirty))...)
	}
	return true
}

// page returns page p for writing: allocated on its first write (charged
// a Chunk) and marked dirty.
func (k *Kernel) page(p uint64) []byte {
	pg := k.pages[p]
	if pg == nil {
		k.meter(Page) // the allocator may have to zero it
		if pg, k.spare = k.spare, nil; pg == nil {
			pg = make([]byte, Page)
		}
		k.pages[p] = pg
	}
	if w, bit := p/64, uint64(1)<<(p%64); k.isDirty[w]&bit == 0 {
		k.isDirty[w] |= bit
		k.dirty = append(k.dirty, uint32(p))
	}
	return pg
}

// writable allocates the pages of [off, off+n) that were never written
// (page), so that writing there cannot stop the call: done before a block's
// records change.
func (k *Kernel) writable(off, n uint64) {
	for p := off / Page; p <= (off+n-1)/Page; p++ {
		k.page(p)
	}
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
	h := k.pos + header
	k.writable(h-header, header)
	if !k.record() {
		return 0
	}
	k.setBlock(h, block{size: n, used: n, active: true})
	k.pos = h + n
	return h
}

// setBlock records the block at h and mirrors its header into memory.
func (k *Kernel) setBlock(h uint64, b block) {
	k.blocks[h] = b
	k.peakBlocks = max(k.peakBlocks, len(k.blocks))
	k.writeHeader(h, b)
}

// maxReuseScan bounds how many free blocks one alloc looks at, so that a
// guest that freed many blocks cannot make every allocation walk them all
// (host work no fuel pays for); past it the memory grows.
const maxReuseScan = 256

// reuse takes the first free block of at least n bytes among the first
// maxReuseScan, splitting it when enough would be left over.
func (k *Kernel) reuse(n uint64) uint64 {
	free := k.freed[k.freedHead:]
	for i, h := range free[:min(len(free), maxReuseScan)] {
		b, ok := k.blocks[h]
		if !ok || b.active || b.size < n {
			continue
		}
		split := b.size-n > splitMin+header
		k.writable(h-header, header)
		if split {
			k.writable(h+n, header)
		}
		// Remove entry i, shifting the i before it (not the rest).
		copy(free[1:i+1], free[:i])
		k.freedHead++
		if k.freedHead >= 1024 && k.freedHead >= len(k.freed)/2 {
			// Drop the taken prefix once it is half the list: amortised, a
			// copy of at most the entries taken since the last one.
			n := copy(k.freed, k.freed[k.freedHead:])
			k.freed, k.freedHead = k.freed[:n], 0
		} else if k.freedHead == len(k.freed) {
			k.freed, k.freedHead = k.freed[:0], 0
		}
		if rest := b.size - n; split && k.record() {
			b.size = n
			nh := h + n + header
			k.setBlock(nh, block{size: rest - header})
			k.freed = append(k.freed, nh)
		}
		b.used, b.active = n, true
		k.setBlock(h, b)
		return h
	}
	return 0
}

// writeHeader mirrors block b's header into memory, where Extism keeps it.
func (k *Kernel) writeHeader(h uint64, b block) {
	var hdr [header]byte
	hdr[0] = blockFree
	if b.active {
		hdr[0] = blockActive
	}
	binary.LittleEndian.PutUint32(hdr[4:], uint32(b.size))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(b.used))
	k.write(h-header, hdr[:], false)
}

// Free marks the block at h free; 0 and unknown handles are ignored.
// Freeing the input block empties the input.
func (k *Kernel) Free(h uint64) {
	b, ok := k.blocks[h]
	if !ok || !b.active {
		return
	}
	b.active, b.used = false, 0
	k.setBlock(h, b)
	k.freed = append(k.freed, h)
	if h == k.InputOff {
		k.InputLen = 0
	}
}

// Length is the used length of the active block whose data starts at h, 0
// for anything else.
func (k *Kernel) Length(h uint64) uint64 {
	if b, ok := k.blocks[h]; ok && b.active {
		return b.used
	}
	return 0
}

// InBounds reports whether [off, off+n) lies in kernel memory.
func (k *Kernel) InBounds(off, n uint64) bool {
	end := off + n
	return end >= off && end <= k.Size()
}

// Read copies [off, off+n) out of kernel memory, charging each chunk
// before it is copied; the caller checked bounds. The copy goes into memory
// that is not cleared first: make([]byte, n) clears all n bytes in one step
// no Meter call divides (14 ms for 200 MiB of reused heap), so a copy of
// hundreds of MiB (Extism's output) would run that long past an interrupt.
// A Meter panic drops the partial copy.
func (k *Kernel) Read(off, n uint64) []byte {
	if n == 0 {
		return []byte{}
	}
	// Memory the runtime did not clear (a make would clear n bytes in one
	// step the meter cannot divide); every byte is appended, a chunk at a
	// time, before it is returned.
	b := rawbuf.Uncleared(int(n))
	for n > 0 {
		p, o := off/Page, off%Page
		c := min(n, Page-o)
		k.meter(c)
		if pg := k.pages[p]; pg != nil {
			b = append(b, pg[o:o+c]...)
		} else {
			b = append(b, zeroPage[:c]...)
		}
		n, off = n-c, off+c
	}
	return b
}

// zeroPage is what a page never written reads as.
var zeroPage [Page]byte

// copyOut copies kernel memory at off into dst (a few bytes: load_u64),
// a page at a time, uncharged.
func (k *Kernel) copyOut(dst []byte, off uint64) {
	for len(dst) > 0 {
		p, o := off/Page, off%Page
		c := min(uint64(len(dst)), Page-o)
		if pg := k.pages[p]; pg != nil {
			copy(dst[:c], pg[o:])
		} else {
			clear(dst[:c])
		}
		dst, off = dst[c:], off+c
	}
}

// write copies b into kernel memory at off, a page (Chunk) at a time, each
// charged first when metered; the caller checked bounds.
func (k *Kernel) write(off uint64, b []byte, metered bool) {
	for len(b) > 0 {
		p, o := off/Page, off%Page
		c := min(uint64(len(b)), Page-o)
		if metered {
			k.meter(c)
		}
		copy(k.page(p)[o:], b[:c])
		k.ends[p] = max(k.ends[p], uint32(o+c))
		b, off = b[c:], off+c
	}
}

// LoadU8 reads the byte at off.
func (k *Kernel) LoadU8(off uint64) (uint8, error) {
	if !k.InBounds(off, 1) {
		return 0, outOfBounds("extism: load_u8 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	if pg := k.pages[off/Page]; pg != nil {
		return pg[off%Page], nil
	}
	return 0, nil
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
	p, o := off/Page, off%Page
	k.page(p)[o] = v
	k.ends[p] = max(k.ends[p], uint32(o+1))
	return nil
}

// StoreU64 writes v at off, little-endian.
func (k *Kernel) StoreU64(off, v uint64) error {
	if !k.InBounds(off, 8) {
		return outOfBounds("extism: store_u64 at %d is outside kernel memory (%d bytes)", off, k.Size())
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	k.write(off, b[:], false)
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
	k.write(h, b, true)
	k.InputOff, k.InputLen = h, uint64(len(b))
	return true
}

// Reset clears every block and the input, output and error, as Extism's
// reset does; the memory stays its size, all zeros. Only the pages written
// since they were last cleared are cleared, a page at a time, each charged
// first: its cost is the guest's writes since, not the memory's size. The
// records go first, so a Meter panic leaves a kernel with no blocks whose
// uncleared pages are still listed dirty.
func (k *Kernel) Reset() {
	k.acct.Release(int64(len(k.blocks)) * blockHostBytes)
	k.clearRecords()
	for len(k.dirty) > 0 {
		p := k.dirty[len(k.dirty)-1]
		k.meter(Page)
		k.clearPage(p)
	}
}

// clearPage clears dirty page p up to the end of what was written in it
// and takes it off the dirty list, whose last entry it is.
func (k *Kernel) clearPage(p uint32) {
	clear(k.pages[p][:k.ends[p]])
	k.ends[p] = 0
	k.dirty = k.dirty[:len(k.dirty)-1]
	k.isDirty[p/64] &^= 1 << (p % 64)
}

// Renew makes k what New(acct, meter) returns — no pages, no blocks, its
// memory reserved in acct from now on — for the next call of the same
// instance, keeping its first page's buffer, cleared where it was written,
// for its next first write: a call then costs no 64 KiB allocation. What
// k reserved in its old account is not released (the caller resets that
// account between calls, limits.Account.Reset). The clearing is charged
// as Reset's is.
func (k *Kernel) Renew(acct *limits.Account) {
	spare := k.spare // kept by an earlier Renew whose kernel wrote no page since (Idle)
	if len(k.pages) > 0 && k.pages[0] != nil {
		spare = k.pages[0]
		if k.isDirty[0]&1 != 0 {
			// Move page 0 to the end of the dirty list and clear it there.
			for i, p := range k.dirty {
				if p == 0 {
					k.dirty[i] = k.dirty[len(k.dirty)-1]
					k.dirty[len(k.dirty)-1] = 0
					break
				}
			}
			k.meter(Page)
			k.clearPage(0)
		}
	}
	clear(k.pages)
	clear(k.isDirty)
	k.pages, k.ends, k.isDirty, k.dirty = k.pages[:0], k.ends[:0], k.isDirty[:0], k.dirty[:0]
	k.spare, k.acct = spare, acct
	k.clearRecords()
}

// Idle empties k between calls as Renew(k's account) does — every page
// but the first one's buffer let go, that one cleared where it was
// written — and lets go of the bookkeeping a large call left behind (a
// block map of more than idleKeepRecords records, a free list longer than
// that, page tables of more than idleKeepPages pages), so that an idle
// instance's kernel holds HeldBytes, a page and small tables, not the last
// call's pages and records. Clearing is charged as Renew's is, to the call
// k's meter charges then (none between calls).
func (k *Kernel) Idle() {
	k.Renew(k.acct)
	if k.peakBlocks > idleKeepRecords {
		k.blocks, k.peakBlocks = map[uint64]block{}, 0
	}
	if cap(k.freed) > idleKeepRecords {
		k.freed = nil
	}
	if cap(k.pages) > idleKeepPages {
		k.pages, k.ends, k.isDirty, k.dirty = nil, nil, nil, nil
	}
}

const (
	idleKeepRecords = 64 // block records an idle kernel's map and free list keep room for
	idleKeepPages   = 64 // pages (4 MiB of kernel memory) an idle kernel's page tables keep room for
)

// HeldBytes is about what k holds of the host's memory besides its
// account's reservations: the kept page buffer and its tables' capacity
// (after Idle, a page and at most a few KiB).
func (k *Kernel) HeldBytes() int64 {
	const sliceHeader = 24
	n := int64(cap(k.spare)) + int64(cap(k.pages))*sliceHeader + int64(cap(k.ends))*4 +
		int64(cap(k.isDirty))*8 + int64(cap(k.dirty))*4 + int64(cap(k.freed))*8 +
		int64(k.peakBlocks)*blockHostBytes
	for _, p := range k.pages {
		n += int64(cap(p))
	}
	return n
}

// clearRecords empties the block records, the bump position and the
// input, output and error ranges (Reset, Renew).
func (k *Kernel) clearRecords() {
	k.pos = rootAt + rootSize
	if k.peakBlocks > maxClearBlocks {
		k.blocks, k.peakBlocks = map[uint64]block{}, 0
	} else {
		clear(k.blocks)
	}
	k.freed, k.freedHead = k.freed[:0], 0
	k.InputOff, k.InputLen, k.OutputOff, k.OutputLen, k.ErrorOff = 0, 0, 0, 0, 0
}

// maxClearBlocks is the most block records Reset clears in place; a map
// that held more is replaced (its old buckets are the collector's).
const maxClearBlocks = 4096

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
	k.write(h, b, true)
	return h, true
}

func (k *Kernel) String() string {
	return fmt.Sprintf("kernel{%d pages (%d dirty), pos %d, %d blocks, %d free (list %d)}", len(k.pages), len(k.dirty), k.pos, len(k.blocks), len(k.freed)-k.freedHead, len(k.freed))
}
