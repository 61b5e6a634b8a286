// Package sdkhttp is the guest side of sandboxd's HTTP import: an
// http.RoundTripper (Transport) so Go handlers use net/http unchanged. It is
// a separate package so handlers that make no requests do not link net/http.
package sdkhttp
