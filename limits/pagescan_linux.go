//go:build linux

package limits

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PAGEMAP_SCAN (Linux 6.7, linux/fs.h) asks the kernel for the runs of pages
// in a range whose page-table entries match a set of categories. A reset
// uses it to find the pages an instance wrote without reading a page-map
// entry for every page of its memory: the kernel skips what does not match
// and reports the rest as a few address ranges, and it does not work out
// the mapping counts a page-map entry carries.

// pmScanArg is struct pm_scan_arg.
type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages       uint64
	categoryInverted, categoryMask, categoryAnyofMask, returnMask uint64
}

// pageRegion is struct page_region: the pages [start, end) of one run.
type pageRegion struct{ start, end, categories uint64 }

const (
	// _IOWR('f', 16, struct pm_scan_arg): read-write, the argument's size
	// (96 bytes), type 'f', number 16; 0xc0606610.
	pagemapScan   = 3<<30 | uintptr(unsafe.Sizeof(pmScanArg{}))<<16 | 'f'<<8 | 16
	pageIsFile    = 1 << 2
	pageIsPresent = 1 << 3
	pageIsSwapped = 1 << 4
)

// scanBuf is one scan's argument and result vector. It lives on the heap
// (scanBufs), never on a goroutine stack: the kernel writes to the
// addresses the argument holds, and a stack can move.
type scanBuf struct {
	arg  pmScanArg
	regs [KeepPagesMax + 1]pageRegion
}

var (
	scanBufs        = sync.Pool{New: func() any { return new(scanBuf) }}
	scanUnsupported atomic.Bool // the kernel has no PAGEMAP_SCAN: read the page map
)

// copyBackScan is copyBack's common case (no working set wanted) through
// PAGEMAP_SCAN: it copies the image (view) over the pages of b the instance
// wrote — the same pages pageWritten picks from the page map: present or
// swapped, not a file page. ok is false, having changed nothing, when the
// kernel cannot scan (the caller reads the page map instead); kept is false
// when the instance wrote more than KeepPagesMax pages (the caller
// discards them all; nothing was copied).
func copyBackScan(fd int, b, view []byte) (kept, ok bool) {
	if scanUnsupported.Load() || len(b) == 0 || len(b)%pageStep != 0 || len(view) < len(b) ||
		uintptr(unsafe.Pointer(&b[0]))%pageStep != 0 {
		return false, false
	}
	sb := scanBufs.Get().(*scanBuf)
	defer scanBufs.Put(sb)
	base := uint64(uintptr(unsafe.Pointer(&b[0])))
	sb.arg = pmScanArg{
		size:  uint64(unsafe.Sizeof(sb.arg)),
		start: base, end: base + uint64(len(b)),
		vec: uint64(uintptr(unsafe.Pointer(&sb.regs[0]))), vecLen: uint64(len(sb.regs)),
		// One page past the most a reset keeps tells "too many" without
		// walking the rest.
		maxPages:          KeepPagesMax + 1,
		categoryInverted:  pageIsFile,
		categoryMask:      pageIsFile, // not a file page
		categoryAnyofMask: pageIsPresent | pageIsSwapped,
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), pagemapScan, uintptr(unsafe.Pointer(&sb.arg)))
	if errno != 0 {
		if errno == unix.ENOTTY || errno == unix.EINVAL || errno == unix.EOPNOTSUPP {
			scanUnsupported.Store(true)
		}
		return false, false
	}
	n := int(r)
	if n < 0 || n > len(sb.regs) {
		return false, false
	}
	regs := sb.regs[:n]
	pages := 0
	for _, rg := range regs {
		if rg.start < base || rg.end > sb.arg.end || rg.end <= rg.start || (rg.start-base)%pageStep != 0 || (rg.end-base)%pageStep != 0 {
			return false, false // not an answer this code understands
		}
		pages += int(rg.end-rg.start) / pageStep
	}
	if pages > KeepPagesMax || sb.arg.walkEnd != sb.arg.end {
		// Stopped at the page limit or with the vector full: more than a
		// reset keeps.
		return false, true
	}
	for _, rg := range regs {
		lo, hi := int(rg.start-base), int(rg.end-base)
		copy(b[lo:hi], view[lo:hi])
	}
	return true, true
}
