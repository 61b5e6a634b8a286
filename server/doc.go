// Package server owns sandboxd's HTTP service: a drop-in for Kindgi's pack
// service speaking pack-protocol v2 exactly (DESIGN.md "Interfaces" and
// ../shared/spec/kindgi-pack-protocol.schema.json), with tools from a Kindgi
// pack index or a directory of manifests, admission control (a global
// concurrency cap, a bounded queue and a per-tool cap), deadlines,
// cancellation on disconnect, draining, reloading, process events and
// Prometheus metrics.
package server
