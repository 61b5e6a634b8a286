//go:build linux

package limits

import "testing"

// BenchmarkImageReset: one reset of a 6 MiB image-mapped memory plus what
// the next call does to it (write 40 pages, read 130 others, the working
// set of go_echo_reactor's call), by copying back the written pages
// (pagemap) and by discarding them (MADV_DONTNEED, the fallback).
func BenchmarkImageReset(b *testing.B) {
	const size = 6 << 20
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i>>12) | 1
	}
	img, err := NewImage(src)
	if err != nil {
		b.Fatal(err)
	}
	defer img.Close()
	for _, mode := range []string{"copy-back", "discard"} {
		b.Run(mode, func(b *testing.B) {
			a := NewAccount(64 * MiB)
			lm := a.Allocator().Allocate(0, 128*PageSize)
			defer lm.Free()
			buf := lm.Reallocate(size)
			if ok, _, err := a.MapImage(img, nil, false); !ok || err != nil {
				b.Fatal(ok, err)
			}
			touch := func() {
				for p := 0; p < 40; p++ {
					buf[p*37%1536*4096] ^= 1
				}
				var sum byte
				for p := 0; p < 130; p++ {
					sum += buf[(p*11+500)%1536*4096+8]
				}
				_ = sum
			}
			touch()
			pagemapFD()
			saved := pagemap.fd
			if mode == "discard" {
				pagemap.fd = -1
			}
			defer func() { pagemap.fd = saved }()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if ok, _, err := a.MapImage(img, nil, false); !ok || err != nil {
					b.Fatal(ok, err)
				}
				touch()
			}
		})
	}
}
