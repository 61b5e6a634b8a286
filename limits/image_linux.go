//go:build linux

package limits

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var errImageSize = errors.New("limits: an image must be a whole number of Wasm pages")

func newImage(b []byte) (*Image, error) {
	fd, err := unix.MemfdCreate("sandboxd-memory-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("limits: memfd_create: %w", err)
	}
	fail := func(what string, err error) (*Image, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("limits: memory image: %s: %w", what, err)
	}
	if len(b) == 0 {
		return fail("empty", errImageSize)
	}
	if err := unix.Ftruncate(fd, int64(len(b))); err != nil {
		return fail("ftruncate", err)
	}
	// Write only the non-zero pages: the file reads as zeros elsewhere and
	// holds no memory for them.
	for off := 0; off < len(b); {
		if allZeroPage(b[off : off+pageStep]) {
			off += pageStep
			continue
		}
		end := off + pageStep
		for end < len(b) && !allZeroPage(b[end:end+pageStep]) {
			end += pageStep
		}
		for p := off; p < end; {
			n, err := unix.Pwrite(fd, b[p:end], int64(p))
			if err != nil {
				return fail("write", err)
			}
			p += n
		}
		off = end
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	view, err := unix.Mmap(fd, 0, len(b), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	return &Image{size: len(b), view: view, fd: fd}, nil
}

// pageStep is the granularity at which zero pages are left out of the file.
const pageStep = 4096

// KeepPagesMax is the most written pages (1 MiB) a reset copies back and
// keeps resident; an instance that wrote more has them all discarded, so
// no instance holds more than that in private copies between calls.
const KeepPagesMax = 256

// allZeroPage reports whether the page b holds only zeros.
func allZeroPage(b []byte) bool { return bytes.Equal(b, zeroPage[:len(b)]) }

// zeroPage is what allZeroPage compares a page with.
var zeroPage [pageStep]byte

func (m *Image) close() error {
	err := unix.Munmap(m.view)
	if cerr := unix.Close(m.fd); err == nil {
		err = cerr
	}
	m.view, m.fd = nil, -1
	return err
}

// mapImage maps img over the first img.size bytes of b, which must lie in
// memory reserveMemory mapped: private, so the instance's writes never
// reach the image. If b already maps img (remap false), it is put back into
// the image's state instead: the pages the instance wrote (its private
// copies, found by PAGEMAP_SCAN where the kernel has it, else in
// /proc/self/pagemap) are copied back from the image and
// stay resident, so the next call neither faults them in again nor the
// pages it only reads (unless it wrote more than KeepPagesMax, or pagemap
// cannot be read: then its written pages are discarded and read as the
// image again). After a first mapping the pages of ws are populated (read,
// or written: a private copy made now rather than by a fault in the guest).
// It returns the working set b had before a reset when want (nil when not
// scanned).
func mapImage(b []byte, img *Image, remap bool, ws *WorkingSet, want bool) (*WorkingSet, error) {
	if remap {
		if _, err := unix.MmapPtr(img.fd, 0, unsafe.Pointer(&b[0]), uintptr(img.size),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
			return nil, err
		}
		populate(b[:img.size], ws)
		return nil, nil
	}
	seen, ok := copyBack(b[:img.size], img.view, false, want)
	if !ok {
		if err := unix.Madvise(b[:img.size], unix.MADV_DONTNEED); err != nil {
			return nil, err
		}
		return nil, nil
	}
	return seen, nil
}

// scanImage returns the pages of b (mapping an image) written and read.
func scanImage(b []byte, img *Image) *WorkingSet {
	ws, _ := copyBack(b[:img.size], nil, true, true)
	return ws
}

// Page-map entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // file page or shared anonymous: here, an image page not written
)

// pageWritten reports whether a page-map entry of an image mapping is a
// page the instance wrote: its own copy (present or swapped, not a file
// page). A present file page is the image's, only read.
func pageWritten(e uint64) bool { return e&(pmPresent|pmSwapped) != 0 && e&pmFile == 0 }

var pagemap struct {
	once sync.Once
	fd   int // -1: not readable
}

func pagemapFD() int {
	pagemap.once.Do(func() {
		fd, err := unix.Open("/proc/self/pagemap", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		pagemap.fd = fd
	})
	return pagemap.fd
}

var entryBufs = sync.Pool{New: func() any { return new([]byte) }}

// readPagemap reads into buf the page-map entries of b's pages, 8 bytes
// each from the page of b's first byte; false when it cannot.
func readPagemap(fd int, buf, b []byte) bool {
	off := int64(uintptr(unsafe.Pointer(&b[0]))/pageStep) * 8
	for got := 0; got < len(buf); {
		n, err := unix.Pread(fd, buf[got:], off+int64(got))
		if err != nil || n <= 0 {
			return false
		}
		got += n
	}
	return true
}

// copyBack copies the image (view) over every page of b that the instance
// wrote — a page of a private file mapping that was written is an anonymous
// copy (present or swapped, not a file page); every other page still reads
// as the image. It reports false, having changed nothing, when the page map
// cannot be read. Without a working set wanted it asks the kernel for just
// those pages (copyBackScan) and reads the page map only where it cannot.
func copyBack(b, view []byte, scanOnly, want bool) (*WorkingSet, bool) {
	fd := pagemapFD()
	if fd < 0 || len(b)%pageStep != 0 {
		return nil, false
	}
	if !want && !scanOnly {
		if kept, ok := copyBackScan(fd, b, view); ok {
			return nil, kept
		}
	}
	pages := len(b) / pageStep
	bp := entryBufs.Get().(*[]byte)
	defer entryBufs.Put(bp)
	if cap(*bp) < pages*8 {
		*bp = make([]byte, pages*8)
	}
	buf := (*bp)[:pages*8]
	if !readPagemap(fd, buf, b) {
		return nil, false
	}
	entry := func(p int) uint64 { return *(*uint64)(unsafe.Pointer(&buf[p*8])) }
	if !want && !scanOnly {
		written := 0
		for p := 0; p < pages; p++ {
			if pageWritten(entry(p)) {
				written++
			}
		}
		if written > KeepPagesMax {
			return nil, false // the caller discards them all
		}
		for p := 0; p < pages; p++ {
			if pageWritten(entry(p)) {
				copy(b[p*pageStep:(p+1)*pageStep], view[p*pageStep:])
			}
		}
		return nil, true
	}
	ws := &WorkingSet{}
	for p := 0; p < pages; p++ {
		switch e := entry(p); {
		case pageWritten(e):
			ws.Write = append(ws.Write, uint32(p))
		case e&pmPresent != 0:
			ws.Read = append(ws.Read, uint32(p))
		}
	}
	if scanOnly {
		return ws, true
	}
	if len(ws.Write) > KeepPagesMax {
		return ws, false // the caller discards them all
	}
	for _, p := range ws.Write {
		copy(b[int(p)*pageStep:int(p+1)*pageStep], view[int(p)*pageStep:])
	}
	return ws, true
}

// populate makes ws's pages of b resident: its written pages as private
// copies (MADV_POPULATE_WRITE, one system call per run of pages), its read
// pages mapped from the image. Failures are ignored: the guest then faults
// the pages in itself.
func populate(b []byte, ws *WorkingSet) {
	if ws == nil {
		return
	}
	each := func(pages []uint32, advice int) {
		for i := 0; i < len(pages); {
			j := i + 1
			for j < len(pages) && pages[j] == pages[j-1]+1 {
				j++
			}
			lo, hi := int(pages[i])*pageStep, int(pages[j-1]+1)*pageStep
			if hi <= len(b) {
				_ = unix.Madvise(b[lo:hi], advice)
			}
			i = j
		}
	}
	each(ws.Write, unix.MADV_POPULATE_WRITE)
	each(ws.Read, unix.MADV_POPULATE_READ)
}

// discardPages makes the pages of b, a whole number of pages of an
// anonymous private mapping, read as zeros; false when it could not.
//
// A short b (at most clearScanMax pages, the page or so a guest grows in a
// call) is cleared in place where it is resident: the page map says which
// pages are (present: written, or read and mapping the zero page), those
// are cleared and stay resident, and the rest already read as zeros. That
// is a read of the page map and a few page clears, where MADV_DONTNEED
// would flush every CPU's TLB for the process (the caller's call on the
// other core included) and leave the pages to fault in again at the next
// call's regrowth. A longer b, one with swapped pages or with more than
// clearKeepMax resident, or a page map that cannot be read, is released
// (MADV_DONTNEED), so no instance keeps more than that resident past its
// memory's size.
func discardPages(b []byte) bool {
	if len(b)%pageStep != 0 {
		return false
	}
	if clearResident(b) {
		return true
	}
	return unix.Madvise(b, unix.MADV_DONTNEED) == nil
}

const (
	clearScanMax = 256 // pages (1 MiB) discardPages scans to clear in place
	clearKeepMax = 32  // resident pages (128 KiB) it clears and keeps
)

// clearResident clears the resident pages of b (discardPages); false,
// having changed nothing, when it cannot tell them or there are too many.
func clearResident(b []byte) bool {
	pages := len(b) / pageStep
	fd := pagemapFD()
	if pages == 0 || pages > clearScanMax || fd < 0 {
		return false
	}
	bp := entryBufs.Get().(*[]byte)
	defer entryBufs.Put(bp)
	if cap(*bp) < pages*8 {
		*bp = make([]byte, pages*8)
	}
	ents := (*bp)[:pages*8]
	entry := func(p int) uint64 { return *(*uint64)(unsafe.Pointer(&ents[p*8])) } // host order
	if !readPagemap(fd, ents, b) {
		return false
	}
	resident := 0
	for p := 0; p < pages; p++ {
		switch e := entry(p); {
		case e&pmSwapped != 0:
			return false
		case e&pmPresent != 0:
			resident++
		}
	}
	if resident > clearKeepMax {
		return false
	}
	for p := 0; p < pages && resident > 0; p++ {
		if entry(p)&pmPresent != 0 {
			clear(b[p*pageStep : (p+1)*pageStep])
			resident--
		}
	}
	return true
}
