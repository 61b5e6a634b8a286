//go:build unix

package artifact

import "syscall"

// openNonblock makes open(2) of a FIFO return at once instead of waiting for
// a writer; it changes nothing for regular files.
const openNonblock = syscall.O_NONBLOCK
