// Package server owns sandboxd's HTTP service: a drop-in for Kindgi's pack
// service speaking pack-protocol v2 exactly (docs/DESIGN.md "Interfaces" and
// spec/kindgi-pack-protocol.schema.json), with tools from a Kindgi
// pack index or a directory of manifests, admission control (global,
// per-tool and per-tenant concurrency caps, per-tenant queues served
// round robin, an optional per-tenant CPU budget: admission.go), deadlines,
// cancellation on disconnect, draining, reloading, process events and
// Prometheus metrics.
//
// Wire decisions where the protocol leaves room:
//
//   - Every outcome of running a tool is HTTP 200 with a closed protocol
//     message (result or error). A native code outside the 14-code enum is
//     mapped (WireCodeOf) and travels, with its details, in cause.
//   - Non-2xx answers are transport-level and carry a one-line text/plain
//     reason, never a protocol message: 401, 404, 405 (checked before the
//     token, with Allow), 413, 415, 503 (with Retry-After and, from
//     admission, a sandboxd-refusal header naming the reason: not ready,
//     draining, the queue or the tenant's queue full, the tenant's CPU
//     budget spent) and 500 (internal-error).
//   - Usage travels in the sandboxd-usage header as JSON; the toolCallId of
//     the call's lifecycle events in sandboxd-call-id.
//   - kindgi-timeout-ms covers queueing, receiving the body and running;
//     the answer goes out at the deadline without waiting for the guest.
package server
