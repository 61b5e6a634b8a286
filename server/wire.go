package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ProtocolVersion is the pack-protocol version sandboxd speaks.
const ProtocolVersion = 2

// WireCode is one of the 14 codes of the pack protocol's closed errorCode
// enum (the wire face of docs/DESIGN.md "Errors").
type WireCode string

// The wire codes.
const (
	WireInputValidationFailed  WireCode = "input-validation-failed"
	WireOutputValidationFailed WireCode = "output-validation-failed"
	WireHandlerImportFailed    WireCode = "handler-import-failed"
	WireHandlerShapeInvalid    WireCode = "handler-shape-invalid"
	WireHandlerThrow           WireCode = "handler-throw"
	WireCheckShapeInvalid      WireCode = "check-shape-invalid"
	WireMalformedMessage       WireCode = "malformed-message"
	WireUnknownProtocolVersion WireCode = "unknown-protocol-version"
	WireUnexpectedMessageKind  WireCode = "unexpected-message-kind"
	WireToolNotInPack          WireCode = "tool-not-in-pack"
	WireCheckNotInPack         WireCode = "check-not-in-pack"
	WireToolVersionMismatch    WireCode = "tool-version-mismatch"
	WireDeadlineExceeded       WireCode = "deadline-exceeded"
	WireCancelled              WireCode = "cancelled"
)

// WireCodeOf maps a native code to its wire code: codes in the enum map to
// themselves; handler-error, handler-trap and limits-exceeded map to
// handler-throw; artifact-*, level-not-supported, policy-refused and
// invalid-tool-definition map to handler-import-failed. internal-error has
// no wire code (ok is false): it is an HTTP 500.
func WireCodeOf(c toolerr.Code) (code WireCode, ok bool) {
	switch c {
	case toolerr.InputValidationFailed, toolerr.OutputValidationFailed, toolerr.HandlerShapeInvalid,
		toolerr.MalformedMessage, toolerr.UnknownProtocolVersion, toolerr.UnexpectedMessageKind,
		toolerr.ToolNotInPack, toolerr.ToolVersionMismatch, toolerr.DeadlineExceeded, toolerr.Cancelled:
		return WireCode(c), true
	case toolerr.HandlerError, toolerr.HandlerTrap, toolerr.LimitsExceeded:
		return WireHandlerThrow, true
	case toolerr.ArtifactUnavailable, toolerr.ArtifactIntegrityFailed, toolerr.ArtifactRefused,
		toolerr.LevelNotSupported, toolerr.PolicyRefused, toolerr.InvalidToolDefinition:
		return WireHandlerImportFailed, true
	}
	return "", false
}

// wireResult is the closed toolResult message.
type wireResult struct {
	V      int             `json:"v"`
	Kind   string          `json:"kind"`
	Output json.RawMessage `json:"output"`
}

// Result frames around the output, by protocol version (every answer
// is ProtocolVersion's; other versions are built per call).
var (
	resultHead = []byte(`{"v":` + strconv.Itoa(ProtocolVersion) + `,"kind":"result","output":`)
	resultTail = []byte("}\n")
	jsonNull   = []byte("null")
)

// jsonParts is the result's encoding with a final newline, in three
// parts, head+out+tail: the output as it is (one JSON value, already
// validated), not copied.
func (r wireResult) jsonParts() (head, out, tail []byte) {
	out = r.Output
	if len(out) == 0 {
		out = jsonNull
	}
	head = resultHead
	if r.V != ProtocolVersion {
		head = append(append([]byte(`{"v":`), strconv.Itoa(r.V)...), `,"kind":"result","output":`...)
	}
	return head, out, resultTail
}

// wireError is the closed error message.
type wireError struct {
	V       int             `json:"v"`
	Kind    string          `json:"kind"`
	Code    WireCode        `json:"code"`
	Message string          `json:"message"`
	ToolID  string          `json:"toolId,omitempty"`
	CheckID string          `json:"checkId,omitempty"`
	Cause   json.RawMessage `json:"cause,omitempty"`
	Issues  []toolerr.Issue `json:"issues,omitempty"`
}

// toWire renders a native failure on the wire. ok is false for
// internal-error. The native code and details travel in cause
// ({"name":native code,"message":…,details…}) when the wire code differs
// from the native one or there are details.
func toWire(e *toolerr.Error) (wireError, bool) {
	code, ok := WireCodeOf(e.Code)
	if !ok {
		return wireError{}, false
	}
	w := wireError{V: ProtocolVersion, Kind: "error", Code: code, Message: e.Message, ToolID: e.ToolID, Issues: wireIssues(e.Issues)}
	if w.Message == "" {
		w.Message = string(e.Code)
	}
	if string(code) != string(e.Code) || len(e.Details) > 0 {
		w.Cause = cause(string(e.Code), e.Message, e.Details)
	}
	return w, true
}

// cause encodes {"name","message",details… (sorted)}; name and message
// always come first and details never override them.
func cause(name, message string, details map[string]any) json.RawMessage {
	var b bytes.Buffer
	enc := func(v any) {
		j, err := json.Marshal(v)
		if err != nil {
			j = []byte(`null`)
		}
		b.Write(j)
	}
	b.WriteString(`{"name":`)
	enc(name)
	b.WriteString(`,"message":`)
	enc(message)
	keys := make([]string, 0, len(details))
	for k := range details {
		if k != "name" && k != "message" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte(',')
		enc(k)
		b.WriteByte(':')
		enc(details[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// wireIssues makes issues fit the protocol's issue shape (params an
// object, never null).
func wireIssues(in []toolerr.Issue) []toolerr.Issue {
	if len(in) == 0 {
		return nil
	}
	out := make([]toolerr.Issue, len(in))
	for i, is := range in {
		if is.Params == nil {
			is.Params = map[string]any{}
		}
		out[i] = is
	}
	return out
}

func protoErr(code WireCode, format string, args ...any) wireError {
	return wireError{V: ProtocolVersion, Kind: "error", Code: code, Message: fmt.Sprintf(format, args...)}
}

// invoke is a parsed, shape-checked toolInvoke, or a checkInvoke (check
// set, toolID the check id).
type invoke struct {
	toolID, toolVersion string
	hasVersion          bool
	input               json.RawMessage
	ctx                 executor.CallContext
	check               bool
	config, trace       json.RawMessage
}

// parseFrame checks a request body against the pack protocol's request
// shapes. It returns the invoke (or check-invoke), or the error message to
// answer. The invoke is a value: returned by pointer it was an allocation
// of its size per call (its call context is most of it).
func parseFrame(body []byte) (invoke, *wireError) {
	fail := func(code WireCode, format string, args ...any) (invoke, *wireError) {
		e := protoErr(code, format, args...)
		return invoke{}, &e
	}
	var topBuf [8]member
	top, fast := splitMembers(body, topBuf[:0])
	if !fast {
		var m map[string]json.RawMessage
		if err := strictUnmarshal(body, &m); err != nil {
			return fail(WireMalformedMessage, "the request is not a JSON object: %v", err)
		}
		top = objectOf(m)
	}
	if top == nil {
		return fail(WireMalformedMessage, "the request is not a JSON object: null")
	}
	rawV, ok := top.get("v")
	if !ok {
		return fail(WireMalformedMessage, "the request has no protocol version \"v\"")
	}
	if string(rawV) != "2" {
		var n json.Number
		if rawV[0] != '"' && json.Unmarshal(rawV, &n) == nil {
			if f, err := n.Float64(); err == nil && f == 2 { // 2.0, 2e0
				goto versionOK
			}
		}
		return fail(WireUnknownProtocolVersion, "protocol version %s is not supported (this service speaks v2)", clip(string(rawV)))
	}
versionOK:
	kind, fastKind := plainKind(top.val("kind"))
	if !fastKind {
		var k string // not &kind: kind would be on the heap on every call
		if err := json.Unmarshal(top.val("kind"), &k); err != nil || top.val("kind") == nil {
			return fail(WireMalformedMessage, "the request has no string \"kind\"")
		}
		kind = k
	}
	switch kind {
	case "invoke":
	case "check-invoke":
		return parseCheck(top)
	default:
		return fail(WireUnexpectedMessageKind, "a pack service answers \"invoke\" and \"check-invoke\", not %q", clip(kind))
	}
	for _, kv := range top {
		switch k := kv.key; k {
		case "v", "kind", "tool", "input", "ctx":
		default:
			return fail(WireMalformedMessage, "unknown field %q in an invoke", clip(k))
		}
	}
	var inv invoke
	var toolBuf [4]member
	tool, fastTool := splitMembers(top.val("tool"), toolBuf[:0])
	if !fastTool {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(top.val("tool"), &m); err != nil || m == nil {
			return fail(WireMalformedMessage, "\"tool\" must be an object {id, version?}")
		}
		tool = objectOf(m)
	}
	for _, kv := range tool {
		if k := kv.key; k != "id" && k != "version" {
			return fail(WireMalformedMessage, "unknown field %q in \"tool\"", clip(k))
		}
	}
	// The slow paths decode into variables of their own, not into inv's
	// fields: a field's address given to json.Unmarshal would put all of
	// inv on the heap on every call.
	var fastID bool
	if inv.toolID, fastID = plainString(tool.val("id")); !fastID {
		var id string
		if err := json.Unmarshal(tool.val("id"), &id); err != nil {
			return fail(WireMalformedMessage, "\"tool.id\" must be a non-empty string")
		}
		inv.toolID = id
	}
	if inv.toolID == "" {
		return fail(WireMalformedMessage, "\"tool.id\" must be a non-empty string")
	}
	if v, ok := tool.get("version"); ok {
		var version string
		if err := json.Unmarshal(v, &version); err != nil || string(v) == "null" {
			return fail(WireMalformedMessage, "\"tool.version\" must be a string")
		}
		inv.toolVersion, inv.hasVersion = version, true
	}
	in, ok := top.get("input")
	if !ok {
		return fail(WireMalformedMessage, "the invoke has no \"input\"")
	}
	inv.input = in
	rawCtx, ok := top.get("ctx")
	if !ok {
		return fail(WireMalformedMessage, "the invoke has no \"ctx\"")
	}
	if msg := parseCallContext(rawCtx, &inv.ctx); msg != "" {
		return fail(WireMalformedMessage, "%s", msg)
	}
	return inv, nil
}

func parseCheck(top object) (invoke, *wireError) {
	fail := func(code WireCode, format string, args ...any) (invoke, *wireError) {
		e := protoErr(code, format, args...)
		return invoke{}, &e
	}
	for _, kv := range top {
		switch k := kv.key; k {
		case "v", "kind", "check", "config", "trace":
		default:
			return fail(WireMalformedMessage, "unknown field %q in a check-invoke", clip(k))
		}
	}
	var check map[string]json.RawMessage
	if err := json.Unmarshal(top.val("check"), &check); err != nil || check == nil {
		return fail(WireMalformedMessage, "\"check\" must be an object {id}")
	}
	for k := range check {
		if k != "id" {
			return fail(WireMalformedMessage, "unknown field %q in \"check\"", clip(k))
		}
	}
	var id string
	if err := json.Unmarshal(check["id"], &id); err != nil || id == "" {
		return fail(WireMalformedMessage, "\"check.id\" must be a non-empty string")
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(top.val("config"), &cfg); err != nil || cfg == nil {
		return fail(WireMalformedMessage, "\"config\" must be an object")
	}
	if _, ok := top.get("trace"); !ok {
		return fail(WireMalformedMessage, "the check-invoke has no \"trace\"")
	}
	// A check-invoke has no ctx: the call context comes from the trace's
	// ids when it carries them (RunTrace's tenantId, runId, projectId, orgId).
	inv := invoke{toolID: id, check: true, config: top.val("config"), trace: top.val("trace")}
	var ids struct {
		TenantID  any `json:"tenantId"`
		RunID     any `json:"runId"`
		ProjectID any `json:"projectId"`
		OrgID     any `json:"orgId"`
	}
	if json.Unmarshal(top.val("trace"), &ids) == nil {
		str := func(v any) string { s, _ := v.(string); return s }
		inv.ctx = executor.CallContext{TenantID: str(ids.TenantID), RunID: str(ids.RunID), ProjectID: str(ids.ProjectID), OrgID: str(ids.OrgID)}
	}
	return inv, nil
}

// wireCheckResult is the pack protocol's checkResult.
type wireCheckResult struct {
	V      int             `json:"v"`
	Kind   string          `json:"kind"`
	Result json.RawMessage `json:"result"`
}

// parseCallContext decodes ctx: tenantId and runId are required strings,
// the known optional fields must have their types, unknown fields are
// accepted and ignored. It returns a problem description or "". cc's
// fields are set, never handed to json.Unmarshal (which would put the
// caller's cc on the heap).
func parseCallContext(raw json.RawMessage, cc *executor.CallContext) string {
	var buf [8]member
	m, fast := splitMembers(raw, buf[:0])
	if !fast {
		var mm map[string]json.RawMessage
		if err := json.Unmarshal(raw, &mm); err != nil || mm == nil {
			return "\"ctx\" must be an object {tenantId, runId, …}"
		}
		m = objectOf(mm)
	}
	// str reads the string member name (absent: "", or a problem when it
	// is required). Values are returned, not stored through pointers
	// into cc: those went into a table that put the caller's cc on the
	// heap.
	str := func(name string, required bool) (string, string) {
		v, ok := m.get(name)
		if !ok {
			if required {
				return "", fmt.Sprintf("\"ctx.%s\" is required", name)
			}
			return "", ""
		}
		if s, ok := plainString(v); ok {
			return s, ""
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || string(v) == "null" {
			return "", fmt.Sprintf("\"ctx.%s\" must be a string", name)
		}
		return s, ""
	}
	var p string
	if cc.TenantID, p = str("tenantId", true); p != "" {
		return p
	}
	if cc.RunID, p = str("runId", true); p != "" {
		return p
	}
	if cc.ProjectID, p = str("projectId", false); p != "" {
		return p
	}
	if cc.OrgID, p = str("orgId", false); p != "" {
		return p
	}
	if cc.RequestID, p = str("requestId", false); p != "" {
		return p
	}
	if cc.IdempotencyKey, p = str("idempotencyKey", false); p != "" {
		return p
	}
	if v, ok := m.get("env"); ok {
		var env map[string]string
		if err := json.Unmarshal(v, &env); err != nil || string(v) == "null" {
			return "\"ctx.env\" must be an object of strings"
		}
		cc.Env = env
	}
	if v, ok := m.get("secrets"); ok {
		var sec map[string]json.RawMessage
		if err := json.Unmarshal(v, &sec); err != nil || sec == nil {
			return "\"ctx.secrets\" must be an object"
		}
		cc.Secrets = map[string]string{}
		for k, raw := range sec {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				cc.Secrets[k] = s
			} else {
				cc.Secrets[k] = string(raw) // a structured secret reaches the guest as JSON text
			}
		}
	}
	if v, ok := m.get("config"); ok {
		var config map[string]json.RawMessage
		if err := json.Unmarshal(v, &config); err != nil || config == nil {
			return "\"ctx.config\" must be an object"
		}
		cc.Config = config
	}
	if v, ok := m.get("settings"); ok {
		var s map[string]map[string]json.RawMessage
		if err := json.Unmarshal(v, &s); err != nil || s == nil {
			return "\"ctx.settings\" must be an object of objects"
		}
		for _, blk := range s {
			if blk == nil {
				return "\"ctx.settings\" must be an object of objects"
			}
		}
		cc.Settings = v
	}
	return ""
}

// strictUnmarshal decodes exactly one JSON value (trailing data refused).
// json.Unmarshal checks the whole input first and decodes in place: no
// second buffer of the body's size (a json.Decoder would copy it).
func strictUnmarshal(b []byte, v any) error {
	return json.Unmarshal(b, v)
}

// clipID bounds a caller-chosen id written to a process event: at most
// MaxLoggedIDBytes bytes of it, then a marker with the full length.
func clipID(s string) string {
	if len(s) <= MaxLoggedIDBytes {
		return s
	}
	return strings.ToValidUTF8(s[:MaxLoggedIDBytes], "") + fmt.Sprintf("…(%d bytes)", len(s))
}

// clip shortens caller-supplied text echoed in a message.
func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
