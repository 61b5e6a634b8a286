package limits

import (
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// PageSize is the Wasm page size.
const PageSize = 65536

// MiB is a mebibyte, the unit of memMB.
const MiB = 1 << 20

// Account is the memMB budget of one guest instance: its linear memory plus
// the host-side buffers held for the invocation it is serving. Linear memory
// is charged through the MemoryAllocator the Account provides; host buffers
// through Reserve. Any refusal is remembered so the caller can report
// limits-exceeded instead of whatever the guest does next. Methods are safe
// for concurrent use.
type Account struct {
	limit   int64
	linear  atomic.Int64
	host    atomic.Int64
	peak    atomic.Int64
	refused atomic.Int64 // largest total that was refused; 0 if none
	mem     atomic.Pointer[linearMemory]
}

// NewAccount returns an account capped at limit bytes.
func NewAccount(limit int64) *Account { return &Account{limit: limit} }

// Limit returns the cap in bytes.
func (a *Account) Limit() int64 { return a.limit }

// Reserve charges n bytes of host buffer. It returns false, and records the
// refusal, if that would pass the cap.
func (a *Account) Reserve(n int64) bool {
	if n < 0 {
		return false
	}
	for {
		h := a.host.Load()
		total := a.linear.Load() + h + n
		if total > a.limit {
			a.recordRefusal(total)
			return false
		}
		if a.host.CompareAndSwap(h, h+n) {
			a.notePeak(total)
			return true
		}
	}
}

// Release returns n bytes of host buffer to the account.
func (a *Account) Release(n int64) { a.host.Add(-n) }

// growLinear moves the linear memory charge to size bytes.
func (a *Account) growLinear(size int64) bool {
	total := size + a.host.Load()
	if total > a.limit {
		a.recordRefusal(total)
		return false
	}
	a.linear.Store(size)
	a.notePeak(total)
	return true
}

func (a *Account) notePeak(total int64) {
	for {
		p := a.peak.Load()
		if total <= p || a.peak.CompareAndSwap(p, total) {
			return
		}
	}
}

func (a *Account) recordRefusal(total int64) {
	for {
		r := a.refused.Load()
		if total <= r || a.refused.CompareAndSwap(r, total) {
			return
		}
	}
}

// Reset starts a new invocation on the same instance: host buffers are
// dropped, the peak restarts from the current linear memory and refusals are
// forgotten.
func (a *Account) Reset() {
	a.host.Store(0)
	a.peak.Store(a.linear.Load())
	a.refused.Store(0)
}

// Peak returns the highest linear+host total seen since the last Reset.
func (a *Account) Peak() int64 { return a.peak.Load() }

// Refused returns the largest total a refused request would have reached, or
// 0 when nothing was refused since the last Reset.
func (a *Account) Refused() int64 { return a.refused.Load() }

// Linear returns the current size of the guest's linear memory in bytes.
func (a *Account) Linear() int64 { return a.linear.Load() }

// Allocator returns the wazero memory allocator that charges this account.
// Pass it with experimental.WithMemoryAllocator when instantiating the module
// the account belongs to; it must back exactly one module instance.
func (a *Account) Allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
		m := newLinearMemory(a, max)
		a.mem.Store(m)
		return m
	})
}

// linearMemory backs one Wasm memory. It reserves address space for the
// smaller of the module's maximum and the account's cap once, so growth never
// copies; pages become resident only when the guest touches them.
type linearMemory struct {
	acct   *Account
	mu     sync.Mutex
	buf    []byte // len = current size, cap = reservation
	free   func()
	mmaped bool   // buf is a reservation reserveMemory mapped (not the Go heap)
	image  *Image // the image buf's first pages map, if any (MapImage)
}

func newLinearMemory(a *Account, max uint64) *linearMemory {
	reserve := uint64(a.limit)
	if max < reserve {
		reserve = max
	}
	reserve = (reserve + PageSize - 1) / PageSize * PageSize
	buf, free, mmaped := reserveMemory(reserve)
	return &linearMemory{acct: a, buf: buf[:0], free: free, mmaped: mmaped}
}

// Reallocate implements experimental.LinearMemory. It returns nil, which makes
// memory.grow return -1 in the guest, when size passes the account's cap.
func (m *linearMemory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if size > uint64(cap(m.buf)) || !m.acct.growLinear(int64(size)) {
		if size > uint64(cap(m.buf)) {
			m.acct.recordRefusal(int64(size) + m.acct.host.Load())
		}
		return nil
	}
	m.buf = m.buf[:size]
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.free != nil {
		m.free()
		m.free = nil
		m.buf = nil
		m.image = nil
		m.acct.linear.Store(0)
	}
}

// Discard makes the account's linear memory past its first from bytes read
// as zeros again, as memory a guest has not grown into yet does: a
// recycled instance whose memory grew during its call is put back to its
// saved size, and what the call wrote past it must not reach the next
// call. On Linux a short tail is cleared where it is resident (the page
// or so a guest grows in a call: no TLB flush, no faults when it grows
// again) and a longer one is released to the kernel (MADV_DONTNEED, so it
// costs nothing until touched again): discardPages; memory on the Go heap,
// or outside Linux, is cleared. The size and charge are left to
// the allocator's next Reallocate. It returns false, changing nothing,
// when there is no memory, it is not longer than from, from is not a
// whole number of Wasm pages, or the bytes past from map an image.
func (a *Account) Discard(from int64) bool {
	m := a.mem.Load()
	if m == nil || from < 0 || from%PageSize != 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.free == nil || int64(len(m.buf)) <= from || m.image != nil && int64(m.image.size) > from {
		return false
	}
	tail := m.buf[from:]
	if !m.mmaped || !discardPages(tail) {
		clear(tail)
	}
	return true
}

// MapImage makes the first img.Size() bytes of the account's linear memory
// read as img, copy-on-write: the first time it maps the image over them
// (whatever they held is dropped) and makes ws's pages resident (nil:
// none), so the guest does not fault them in itself; later it puts back the
// pages written since (copied from the image and kept resident, or
// discarded so they read as the image again). The memory must be exactly the image's size.
// When want, it returns the pages the instance had written and read since
// the last MapImage, when it could see them (nil otherwise).
//
// It returns false and nil, changing nothing, where mapping is impossible
// (no image support, memory on the Go heap, another size): the caller may
// copy the image instead. An error means the kernel refused the mapping
// and the memory may no longer be mapped at all: the instance must be
// closed without running or touching its memory again.
func (a *Account) MapImage(img *Image, ws *WorkingSet, want bool) (bool, *WorkingSet, error) {
	m := a.mem.Load()
	if m == nil || img == nil {
		return false, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mmaped || m.free == nil || len(m.buf) != img.size || img.size == 0 {
		return false, nil, nil
	}
	img.mu.RLock() // its fd and view stay (and the fd is not reused) while mapping
	defer img.mu.RUnlock()
	if img.closed {
		return false, nil, nil
	}
	seen, err := mapImage(m.buf, img, m.image != img, ws, want)
	if err != nil {
		m.image = nil
		return false, nil, err
	}
	m.image = img
	return true, seen, nil
}

// ImageWorkingSet returns the pages of the account's memory, mapped from
// img, that were written and read since it was mapped or last reset (nil
// when it does not map img or the page map cannot be read).
func (a *Account) ImageWorkingSet(img *Image) *WorkingSet {
	m := a.mem.Load()
	if m == nil || img == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.image != img || m.free == nil || len(m.buf) < img.size {
		return nil
	}
	return scanImage(m.buf, img)
}
