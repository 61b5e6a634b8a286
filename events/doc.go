// Package events owns sandboxd's canonical tool-call events: the
// `_meta["x.ai/tool"]` envelope of docs/DESIGN.md "Canonical tool-call events"
// (see spec/x-ai-tool-envelope.md) and the pending → in_progress →
// completed|failed lifecycle records built from executor.CallEvent, written
// as JSON lines to a sink.
package events
