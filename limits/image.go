package limits

// Image is a read-only copy of a linear memory that instances of the same
// module map copy-on-write (Linux: a sealed memfd), so an instance made
// from it costs a mapping instead of a copy, its clean pages are shared with
// every other instance mapping the image, and putting it back into the
// image's state discards the pages it dirtied (Account.MapImage).
//
// Nothing can change an Image after NewImage returns: the memfd is sealed
// against writes, growth and shrinking, and instances map it private.
type Image struct {
	size int
	view []byte // a read-only shared mapping of the whole image
	fd   int
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

// Bytes returns the image's contents, read-only: writing to them faults.
func (m *Image) Bytes() []byte { return m.view }

// Close releases the image. Instances that mapped it keep their mappings
// (the kernel keeps the pages until the last one is unmapped); it must not
// be mapped into another instance afterwards.
func (m *Image) Close() error {
	if m == nil {
		return nil
	}
	return m.close()
}
