//go:build linux

package limits

import "testing"

// BenchmarkImageReset: one reset of an image-mapped memory plus what the
// next call does to it, for two working sets: go_echo_reactor's call (6 MiB,
// 40 pages written, 130 others read) and the Haskell PDK's hello plug-in's
// (11 MiB, 14 pages written, every page read). The written pages are found
// by PAGEMAP_SCAN (scan) or by reading the page map (page-map), and copied
// back; or they are discarded (MADV_DONTNEED, the fallback without either).
func BenchmarkImageReset(b *testing.B) {
	for _, ws := range []struct {
		name                 string
		pages, written, read int
	}{{"go_echo", 1536, 40, 130}, {"haskell", 2816, 14, 2816}} {
		size := ws.pages * 4096
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i>>12) | 1
		}
		img, err := NewImage(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"scan", "page-map", "discard"} {
			b.Run(ws.name+"/"+mode, func(b *testing.B) {
				a := NewAccount(64 * MiB)
				lm := a.Allocator().Allocate(0, 256*PageSize)
				defer lm.Free()
				buf := lm.Reallocate(uint64(size))
				if ok, _, err := a.MapImage(img, nil, false); !ok || err != nil {
					b.Fatal(ok, err)
				}
				touch := func() {
					for p := 0; p < ws.written; p++ {
						buf[p*37%ws.pages*4096] ^= 1
					}
					var sum byte
					for p := 0; p < ws.read; p++ {
						sum += buf[(p*11+500)%ws.pages*4096+8]
					}
					benchSink = sum
				}
				touch()
				pagemapFD()
				saved := pagemap.fd
				switch mode {
				case "page-map":
					scanUnsupported.Store(true)
					defer scanUnsupported.Store(false)
				case "discard":
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
		img.Close()
	}
}

var benchSink byte
