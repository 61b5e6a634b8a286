package rawbuf

import (
	"bytes"
	"testing"
	"unsafe"
)

// Uncleared's slice is empty with room for n, appends fill it in place (no
// reallocation while within n), and what was appended is what it holds.
func TestUncleared(t *testing.T) {
	for _, n := range []int{1, 7, 4096, 1 << 20} {
		b := Uncleared(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("n=%d: len %d cap %d", n, len(b), cap(b))
		}
		want := bytes.Repeat([]byte{0xa5}, n)
		p := unsafe.SliceData(b)
		b = append(b, want...)
		if unsafe.SliceData(b) != p {
			t.Fatalf("n=%d: the appends reallocated the buffer", n)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("n=%d: the buffer does not hold what was appended", n)
		}
	}
	if b := Uncleared(0); b != nil {
		t.Fatalf("Uncleared(0) = %v, want nil", b)
	}
}
