// Package rawbuf hands out byte buffers the runtime did not clear, for host
// work that fills a large buffer a chunk at a time and checks for an
// interrupt between chunks: make([]byte, n) clears all n bytes in one step
// that no check divides (a 480 MiB output copy is a quarter of a second of
// clearing before the first chunk).
//
// The bytes past the slice's length are whatever the heap held before —
// another call's data, possibly. A caller must append every byte it uses
// and must never reslice past the length it wrote; a copy interrupted
// half-way drops the buffer.
package rawbuf

import (
	"strings"
	"unsafe"
)

// Uncleared returns an empty slice with room for n bytes that the runtime
// did not clear (strings.Builder's buffer; nil for n ≤ 0). The caller
// appends every byte it uses.
func Uncleared(n int) []byte {
	if n <= 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0)
	s := b.String() // the only string over the buffer, dropped here
	return unsafe.Slice(unsafe.StringData(s), n)[:0]
}
