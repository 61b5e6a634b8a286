//go:build wasip1

package sdk

import "unsafe"

// The sandboxd_v1 host functions this package uses (abi/README.md). Every
// parameter and result is an i32.

//go:wasmimport sandboxd_v1 input_read
func inputRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 context_read
func contextRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 output_set
func outputSet(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 error_set
func errorSet(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 log
func logLine(level int32, ptr unsafe.Pointer, n uint32)

//go:wasmimport sandboxd_v1 secret_get
func secretGet(namePtr unsafe.Pointer, nameLen uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 config_get
func configGet(namePtr unsafe.Pointer, nameLen uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 last_error_read
func lastErrorRead(ptr unsafe.Pointer, n uint32) int32

// handle is the reactor entry point: () -> i32, 0 for success.
//
//go:wasmexport handle
func handle() int32 {
	return handleWith(wasmHost{})
}

// commandHost is the host Main uses: the real one, since command-style
// handlers may import sandboxd_v1 too.
func commandHost() host { return wasmHost{} }

// wasmHost calls the sandboxd_v1 imports.
type wasmHost struct{}

func (wasmHost) input() ([]byte, error)   { return readSized(inputRead) }
func (wasmHost) context() ([]byte, error) { return readSized(contextRead) }

func (wasmHost) setOutput(b []byte) error {
	return check(outputSet(bytesPtr(b), uint32(len(b))))
}

func (wasmHost) setError(b []byte) error {
	return check(errorSet(bytesPtr(b), uint32(len(b))))
}

func (wasmHost) log(level Level, msg string) {
	logLine(int32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

func (wasmHost) secret(name string) ([]byte, error) {
	return readSized(func(ptr unsafe.Pointer, n uint32) int32 {
		return secretGet(unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)), ptr, n)
	})
}

func (wasmHost) config(name string) ([]byte, error) {
	return readSized(func(ptr unsafe.Pointer, n uint32) int32 {
		return configGet(unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)), ptr, n)
	})
}

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// readSized reads a value with the ABI's size/copy convention: a first call
// with len 0 learns the size, a second copies the value. The value does not
// change within an invocation; should it grow anyway, the read is retried.
func readSized(fn func(ptr unsafe.Pointer, n uint32) int32) ([]byte, error) {
	var buf []byte
	for {
		size := fn(bytesPtr(buf), uint32(len(buf)))
		if size < 0 {
			return nil, hostError(size)
		}
		if int(size) <= len(buf) {
			return buf[:size], nil
		}
		buf = make([]byte, size)
	}
}

// check turns a 0|errno result into an error.
func check(r int32) error {
	if r < 0 {
		return hostError(r)
	}
	return nil
}

// hostError builds a *HostError for errno, with the message from
// last_error_read (empty if that fails too).
func hostError(errno int32) error {
	e := &HostError{Errno: errno}
	if size := lastErrorRead(nil, 0); size > 0 {
		buf := make([]byte, size)
		if n := lastErrorRead(bytesPtr(buf), uint32(len(buf))); n >= 0 {
			e.Message = string(buf[:min(int(n), len(buf))])
		}
	}
	return e
}
