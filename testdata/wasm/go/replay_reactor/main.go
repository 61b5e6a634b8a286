// replay_reactor is a Go SDK handler built as a reactor for record and
// replay (docs/replay.md): it fetches {"next": PATH} from input.url, then
// input.url's origin + PATH (PATH starts with /), and reads the wall clock and 8 random bytes,
// so one call draws every kind of host answer a recording holds.
//
// Input: {"url": "...", "headers"?: {...}} (the headers go on both requests).
// Output: {"first": <body 1>, "second": <body 2>, "now": UnixNano, "random": hex}.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unsafe"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

type input struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

type output struct {
	First  json.RawMessage `json:"first"`
	Second json.RawMessage `json:"second"`
	Now    int64           `json:"now"`
	Random string          `json:"random"`
}

// The HTTP import, called directly (net/http would make the module three
// times larger).

//go:wasmimport sandboxd_v1 http_request
func httpRequest(reqPtr unsafe.Pointer, reqLen uint32, bodyPtr unsafe.Pointer, bodyLen uint32) int64

//go:wasmimport sandboxd_v1 http_body_read
func httpBodyRead(h int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport sandboxd_v1 http_close
func httpClose(h int32) int32

// get fetches u and returns its body, read 16 bytes at a time (so a
// recording holds several reads per response).
func get(u string, headers map[string]string) (json.RawMessage, error) {
	req, _ := json.Marshal(map[string]any{"method": "GET", "url": u, "headers": headers})
	h := httpRequest(unsafe.Pointer(&req[0]), uint32(len(req)), nil, 0)
	if h < 0 {
		return nil, &sdk.Error{Code: "egress-failed", Message: "http_request of " + u + " failed"}
	}
	defer httpClose(int32(h))
	var body []byte
	var buf [16]byte
	for {
		n := httpBodyRead(int32(h), unsafe.Pointer(&buf[0]), uint32(len(buf)))
		if n < 0 {
			return nil, &sdk.Error{Code: "egress-failed", Message: "reading the body of " + u + " failed"}
		}
		if n == 0 {
			break
		}
		body = append(body, buf[:n]...)
	}
	if !json.Valid(body) {
		return nil, &sdk.Error{Code: "not-json", Message: "the response of " + u + " is not JSON"}
	}
	return body, nil
}

// origin is u up to its path.
func origin(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[:i+3+j]
		}
	}
	return u
}

func handle(c *sdk.Context, in input) (*output, error) {
	first, err := get(in.URL, in.Headers)
	if err != nil {
		return nil, err
	}
	var next struct {
		Next string `json:"next"`
	}
	if err := json.Unmarshal(first, &next); err != nil || next.Next == "" {
		return nil, &sdk.Error{Code: "no-next", Message: "the first response has no \"next\""}
	}
	second, err := get(origin(in.URL)+next.Next, in.Headers)
	if err != nil {
		return nil, err
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	return &output{First: first, Second: second, Now: time.Now().UnixNano(), Random: hex.EncodeToString(r[:])}, nil
}

func init() { sdk.Handle(handle) }

func main() { sdk.Main() }
