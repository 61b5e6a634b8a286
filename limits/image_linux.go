//go:build linux

package limits

import (
	"errors"
	"fmt"
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

func allZeroPage(b []byte) bool {
	for len(b) >= 8 {
		if *(*uint64)(unsafe.Pointer(&b[0])) != 0 {
			return false
		}
		b = b[8:]
	}
	return true
}

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
// reach the image. If b already maps img, its dirty pages are discarded
// instead (they read as the image again).
func mapImage(b []byte, img *Image, remap bool) error {
	if !remap {
		return unix.Madvise(b[:img.size], unix.MADV_DONTNEED)
	}
	_, err := unix.MmapPtr(img.fd, 0, unsafe.Pointer(&b[0]), uintptr(img.size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE)
	return err
}
