package artifact

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sandboxd/sandboxd/toolerr"
)

// ErrNotRegular is wrapped by the errors OpenRegular, OpenRegularIn and
// ReadRegular return for a path that names a FIFO, a device, a socket, a
// directory or anything else that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens path for reading if, and only if, it is a regular file
// (symbolic links are followed). It never blocks on a FIFO or a device: the
// path is checked before the open, the open itself is non-blocking, and the
// opened descriptor is checked again, so a file swapped for a FIFO between
// the check and the open is refused too. Failures wrap fs.ErrNotExist or
// ErrNotRegular where they apply. The caller closes the file.
func OpenRegular(path string) (*os.File, error) {
	return openRegular(path, os.Stat, func(p string) (*os.File, error) {
		return os.OpenFile(p, os.O_RDONLY|openNonblock, 0)
	})
}

// OpenRegularIn is OpenRegular for a name inside root (os.Root keeps the name
// from escaping the root).
func OpenRegularIn(root *os.Root, name string) (*os.File, error) {
	return openRegular(name, root.Stat, func(p string) (*os.File, error) {
		return root.OpenFile(p, os.O_RDONLY|openNonblock, 0)
	})
}

func openRegular(path string, stat func(string) (os.FileInfo, error), open func(string) (*os.File, error)) (*os.File, error) {
	st, err := stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	fst, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fst.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, fst.Mode())
	}
	return f, nil
}

func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is %s: %w", path, modeName(m), ErrNotRegular)
}

func modeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// ReadRegular reads the regular file at path (see OpenRegular), refusing one
// over max bytes. Errors are *toolerr.Error: artifact-unavailable for a
// missing, unreadable or non-regular file, artifact-refused for one over max.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, unavailable(path, err)
	}
	defer f.Close()
	return readAllCapped(f, path, max)
}

func unavailable(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return toolerr.New(toolerr.ArtifactUnavailable, "%s does not exist", path)
	case errors.Is(err, ErrNotRegular):
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "refusing to read a module from anything but a regular file")
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot open "+path)
}

// readAllCapped reads f (already known to be regular) up to max bytes.
func readAllCapped(f *os.File, path string, max int64) ([]byte, error) {
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s is %d bytes, over the %d-byte cap", path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read "+path)
	}
	if int64(len(b)) > max {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s grew past the %d-byte cap while read", path, max)
	}
	return b, nil
}
