package executor

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// clearDirty leaves b all zeros whatever it held, for lengths that are not
// whole chunks too, and never writes a chunk that is zero already: on a
// read-only mapping of zeros it returns without faulting.
func TestClearDirty(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 17, 64 << 10} {
		b := make([]byte, n)
		for i := 0; i < n; i += 997 {
			b[i] = byte(i | 1)
		}
		if n > 0 {
			b[n-1] = 0xFF
		}
		clearDirty(b)
		if !bytes.Equal(b, make([]byte, n)) {
			t.Fatalf("%d bytes: not all zero after clearDirty", n)
		}
	}
	ro, err := unix.Mmap(-1, 0, 5*4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ro)
	clearDirty(ro)       // a write would fault (SIGSEGV): the chunks are zero, none is written
	clearDirty(ro[100:]) // not chunk-aligned
}
