//go:build !linux

package limits

import "errors"

var errImageSize = errors.New("limits: an image must be a whole number of Wasm pages")

func newImage([]byte) (*Image, error) { return nil, nil }

func (m *Image) close() error { return nil }

func mapImage([]byte, *Image, bool) error { return errors.ErrUnsupported }
