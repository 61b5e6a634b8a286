//go:build unix

package limits

import "syscall"

// reserveMemory maps n bytes of zeroed, lazily committed memory outside the
// Go heap. The returned func unmaps it.
func reserveMemory(n uint64) (_ []byte, free func(), mmaped bool) {
	if n == 0 {
		return []byte{}, func() {}, false
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		// Address space exhausted: fall back to the Go heap for what the
		// guest starts with; growth is refused beyond the slice's capacity.
		return make([]byte, 0, min(n, 1<<20)), func() {}, false
	}
	return b, func() { _ = syscall.Munmap(b) }, true
}
