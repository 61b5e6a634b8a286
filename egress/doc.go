// Package egress owns the policy and the SSRF-proof client behind sandboxd's
// host HTTP import: the `network` allowlist grammar, address classification,
// a dialer that connects only to addresses that passed, redirects re-checked
// hop by hop, and per-invocation budgets (docs/DESIGN.md "Egress").
package egress
