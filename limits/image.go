package limits

import "sync"

// Image is a read-only copy of a linear memory that instances of the same
// module map copy-on-write (Linux: a sealed memfd), so an instance made
// from it costs a mapping instead of a copy, its clean pages are shared with
// every other instance mapping the image, and putting it back into the
// image's state discards the pages it dirtied (Account.MapImage).
//
// Nothing can change an Image after NewImage returns: the memfd is sealed
// against writes, growth and shrinking, and instances map it private.
type Image struct {
	size   int
	mu     sync.RWMutex // Close against mappings and copies
	closed bool
	view   []byte // a read-only shared mapping of the whole image
	fd     int
}

// NewImage copies b (a multiple of PageSize) into a new image. It returns
// nil, nil where images are not supported (not Linux); an error when the
// kernel refused one (no memfd, a seccomp policy, out of memory).
func NewImage(b []byte) (*Image, error) {
	if len(b)%PageSize != 0 {
		return nil, errImageSize
	}
	return newImage(b)
}

// WorkingSet is the pages (4 KiB, numbered from the start of the memory) a
// call of an instance mapped from an image wrote and read: MapImage makes
// them resident ahead of the next call (written pages as private copies),
// so that call takes no page faults on them.
type WorkingSet struct {
	Write, Read []uint32 // ascending
}

// Union returns the pages in ws or o (nil when both are).
func (ws *WorkingSet) Union(o *WorkingSet) *WorkingSet {
	if ws == nil {
		return o
	}
	if o == nil {
		return ws
	}
	return &WorkingSet{Write: unionPages(ws.Write, o.Write), Read: unionPages(ws.Read, o.Read)}
}

// Pages returns how many pages ws names.
func (ws *WorkingSet) Pages() int {
	if ws == nil {
		return 0
	}
	return len(ws.Write) + len(ws.Read)
}

func unionPages(a, b []uint32) []uint32 {
	out := make([]uint32, 0, max(len(a), len(b)))
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || (len(a) > 0 && a[0] < b[0]):
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return out
}

// Size returns the image's size in bytes.
func (m *Image) Size() int { return m.size }

// CopyTo copies the image into b (at least Size() bytes) and reports
// whether it did: false once the image is closed.
func (m *Image) CopyTo(b []byte) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed || len(b) < m.size {
		return false
	}
	copy(b, m.view)
	return true
}

// Close releases the image. Instances that mapped it keep their mappings
// (the kernel keeps the pages until the last one is unmapped); MapImage and
// CopyTo refuse it afterwards.
func (m *Image) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.close()
}
