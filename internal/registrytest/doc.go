// Package registrytest owns the OCI registries sandboxd's tests run against:
// Debian's docker-registry as a real process on a loopback port, and
// go-containerregistry's in-memory registry behind an httptest server, with
// fault injection (failing requests, tampered and truncated blobs).
package registrytest
