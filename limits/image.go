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
