//go:build !wasip1

package sdkhttp

import "net/http"

// RoundTrip implements http.RoundTripper. Outside Wasm it delegates to
// http.DefaultTransport (no sandboxd policy applies).
func (Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return http.DefaultTransport.RoundTrip(req)
}
