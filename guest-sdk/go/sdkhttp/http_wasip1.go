//go:build wasip1

package sdkhttp

import (
	"fmt"
	"io"
	"net/http"
	"unsafe"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

//go:wasmimport sandboxd_v1 last_error_read
func lastErrorRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 http_request
func httpRequest(reqPtr unsafe.Pointer, reqLen uint32, bodyPtr unsafe.Pointer, bodyLen uint32) int64

//go:wasmimport sandboxd_v1 http_status
func httpStatus(h int32) int32

//go:wasmimport sandboxd_v1 http_headers_read
func httpHeadersRead(h int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 http_body_read
func httpBodyRead(h int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 http_close
func httpClose(h int32) int32

// RoundTrip implements http.RoundTripper over the host import.
func (Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("sdk: reading the request body: %w", err)
		}
		body = b
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	desc, err := describe(req)
	if err != nil {
		return nil, err
	}
	r := httpRequest(bytesPtr(desc), uint32(len(desc)), bytesPtr(body), uint32(len(body)))
	if r < 0 {
		return nil, hostError(int32(r))
	}
	h := int32(r)
	status := httpStatus(h)
	if status < 0 {
		err := hostError(status)
		httpClose(h)
		return nil, err
	}
	hb, err := readSized(func(ptr unsafe.Pointer, n uint32) int32 { return httpHeadersRead(h, ptr, n) })
	if err != nil {
		httpClose(h)
		return nil, err
	}
	hdr, cl := parseHeaders(hb)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(int(status))),
		StatusCode:    int(status),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		Body:          &hostBody{h: h},
		ContentLength: cl,
		Request:       req,
	}, nil
}

// hostBody streams a response body with http_body_read.
type hostBody struct {
	h      int32
	done   bool
	closed bool
}

func (b *hostBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, fmt.Errorf("sdk: read from a closed response body")
	}
	if b.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := httpBodyRead(b.h, bytesPtr(p), uint32(len(p)))
	if n < 0 {
		return 0, hostError(n)
	}
	if n == 0 {
		b.done = true
		return 0, io.EOF
	}
	return int(n), nil
}

func (b *hostBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if r := httpClose(b.h); r < 0 {
		return hostError(r)
	}
	return nil
}

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// readSized reads a value with the ABI's size/copy convention.
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

// hostError builds an *sdk.HostError for errno with last_error_read's message.
func hostError(errno int32) error {
	e := &sdk.HostError{Errno: errno}
	if size := lastErrorRead(nil, 0); size > 0 {
		buf := make([]byte, size)
		if n := lastErrorRead(bytesPtr(buf), uint32(len(buf))); n >= 0 {
			e.Message = string(buf[:min(int(n), len(buf))])
		}
	}
	return e
}
