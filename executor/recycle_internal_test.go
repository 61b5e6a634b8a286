package executor

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// A snapshot restores memory exactly, whatever mix of zero and non-zero
// chunks it saved and however the memory was scribbled on since.
func TestSnapshotRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		size := rng.IntN(20*chunk) + 1
		orig := make([]byte, size)
		for off := 0; off < size; off += chunk {
			switch rng.IntN(3) {
			case 0: // all zero
			case 1: // one non-zero byte somewhere in the chunk
				orig[min(off+rng.IntN(chunk), size-1)] = byte(rng.IntN(255) + 1)
			default:
				for i := off; i < min(off+chunk, size); i++ {
					orig[i] = byte(rng.Uint32())
				}
			}
		}
		s := &snapshot{memSize: size, runs: nonZeroRuns(orig)}
		mem := append([]byte(nil), orig...)
		for i := rng.IntN(size); i < size; i += rng.IntN(chunk) + 1 {
			mem[i] = byte(rng.Uint32())
		}
		s.restore(mem)
		if !bytes.Equal(mem, orig) {
			t.Fatalf("trial %d (size %d): restore differs", trial, size)
		}
		var want int64
		for off := 0; off < size; off += chunk {
			if !allZero(orig[off:min(off+chunk, size)]) {
				want += int64(min(chunk, size-off))
			}
		}
		if s.size() != want {
			t.Fatalf("trial %d: snapshot holds %d bytes, want %d", trial, s.size(), want)
		}
	}
}
