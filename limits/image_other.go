//go:build !linux

package limits

import "errors"

var errImageSize = errors.New("limits: an image must be a whole number of Wasm pages")

// KeepPagesMax is the most written pages a reset keeps resident (Linux).
const KeepPagesMax = 256

func newImage([]byte) (*Image, error) { return nil, nil }

func (m *Image) close() error { return nil }

func mapImage([]byte, *Image, bool, *WorkingSet, bool) (*WorkingSet, error) {
	return nil, errors.ErrUnsupported
}

func scanImage([]byte, *Image) *WorkingSet { return nil }

// discardPages cannot promise that released pages read as zeros outside
// Linux (macOS's MADV_DONTNEED may keep them): the caller clears them.
func discardPages([]byte) bool { return false }
