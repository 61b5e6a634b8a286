package mcp

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/toolerr"
)

// The mapping between sandboxd and MCP, in one place (docs/mcp.md).

// _meta keys sandboxd owns (a reverse-DNS prefix of its own; the
// io.modelcontextprotocol/ prefix is reserved). The x.ai/tool envelope
// travels under events.MetaKey.
const (
	// MetaError carries a failed call's native code and details:
	// {"code","message","wireCode"?,"issues"?,"details"?}.
	MetaError = "io.github.sandboxd/error"
	// MetaCall carries {"callId","usage"?,"artifactVersion"} on every
	// tools/call result.
	MetaCall = "io.github.sandboxd/call"
	// MetaTimeoutMs, in a tools/call request's _meta, is the call's
	// deadline in milliseconds (default server.DefaultTimeout, at most
	// server.MaxTimeout).
	MetaTimeoutMs = "io.github.sandboxd/timeoutMs"
)

// metaTimeoutSource names MetaTimeoutMs in a deadline-exceeded message.
const metaTimeoutSource = `_meta "` + MetaTimeoutMs + `"`

// JSON-RPC error codes sandboxd answers besides the standard ones.
const (
	// CodeUnavailable: the call did not run (draining, not ready, the
	// queue or the tenant's queue full, the tenant's CPU budget spent); it
	// may be retried. Its data is {"reason": refusal, "retryAfterMs": N}
	// (N the pack protocol's Retry-After in milliseconds).
	CodeUnavailable = -32000
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// ToolFor maps a catalog tool to its MCP definition:
//
//   - name is the manifest id, refused unless it matches [A-Za-z0-9_.-]{1,128};
//   - description is the manifest's;
//   - inputSchema is the manifest's input, verbatim, refused unless its root
//     has "type": "object" (MCP requires it; the SDK would panic);
//   - outputSchema is the manifest's output, verbatim, when its root has
//     "type": "object" (2025-era clients reject any other root), else none;
//   - annotations: readOnlyHint = mutating is false; destructiveHint =
//     an effect writes or deletes (false when read-only); openWorldHint =
//     network kind is not none, or an effect is network or
//     external-side-effect; idempotentHint false;
//   - _meta["x.ai/tool"] is the canonical envelope without input.
//
// A refusal is an error naming the reason.
func ToolFor(ct server.CatalogTool) (*sdk.Tool, error) {
	m := ct.Manifest
	if !toolName.MatchString(ct.ID) {
		return nil, fmt.Errorf("the id %q is not an MCP tool name (1-128 characters of A-Z a-z 0-9 _ . -)", clip(ct.ID))
	}
	if rootType(m.Input) != "object" {
		return nil, fmt.Errorf("the input schema's root is not {\"type\": \"object\"}, which MCP requires of inputSchema")
	}
	t := &sdk.Tool{
		Name:        ct.ID,
		Description: m.Description,
		InputSchema: json.RawMessage(m.Input),
		Annotations: annotations(m),
		Meta:        sdk.Meta{events.MetaKey: events.NewMeta(m, nil)},
	}
	if rootType(m.Output) == "object" {
		t.OutputSchema = json.RawMessage(m.Output)
	}
	return t, nil
}

func annotations(m *manifest.Manifest) *sdk.ToolAnnotations {
	readOnly := !m.IsMutating()
	destructive, openWorld := false, false
	for _, e := range m.Effects {
		switch e.Kind {
		case "writes", "deletes":
			destructive = !readOnly
		case "network", "external-side-effect":
			openWorld = true
		}
	}
	if m.Network != nil && m.Network.Kind != "none" {
		openWorld = true
	}
	return &sdk.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &destructive, OpenWorldHint: &openWorld}
}

// rootType is the root "type" of a schema when it is one string.
func rootType(schema json.RawMessage) string {
	var root struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(schema, &root) != nil {
		return ""
	}
	s, _ := root.Type.(string)
	return s
}

// resultFor maps a core Outcome to a tools/call answer:
//
//   - success: structuredContent is the validated output when it is a JSON
//     object, plus one text block with the output's JSON;
//   - a tool execution failure (input validation, handler error, trap,
//     limits, deadline, cancelled, output validation, …): isError true,
//     one text block "CODE: message" (with the validation issues), and
//     _meta[MetaError] with the native code and details;
//   - tool-not-in-pack (a tool gone in a reload): JSON-RPC -32602;
//     a refusal: CodeUnavailable; internal-error: -32603 (never code 0).
//
// Every result carries _meta["x.ai/tool"] (the envelope with the input
// projection when the input validated) and _meta[MetaCall].
func resultFor(o *server.Outcome, tool string) (*sdk.CallToolResult, error) {
	if o.Refused != "" {
		data, _ := json.Marshal(map[string]any{"reason": o.Refused, "retryAfterMs": server.RetryAfterSeconds(o.RetryAfter) * 1000})
		return nil, &jsonrpc.Error{Code: CodeUnavailable, Message: "sandboxd: " + o.Refused.Reason(tool), Data: data}
	}
	if o.Err != nil {
		switch o.Err.Code {
		case toolerr.ToolNotInPack:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: o.Err.Message}
		case toolerr.Internal:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sandboxd: internal error"}
		}
	}
	meta := sdk.Meta{}
	if env, ok := o.Envelope(); ok {
		meta[events.MetaKey] = env
	}
	call := map[string]any{"artifactVersion": o.ArtifactVersion}
	if o.CallID != "" {
		call["callId"] = o.CallID
	}
	if o.Usage != nil {
		call["usage"] = o.Usage
	}
	meta[MetaCall] = call
	res := &sdk.CallToolResult{Meta: meta}
	if o.Err == nil {
		out := o.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		if isObject(out) {
			res.StructuredContent = out
		}
		res.Content = []sdk.Content{&sdk.TextContent{Text: string(out)}}
		return res, nil
	}
	te := o.Err
	res.IsError = true
	res.Content = []sdk.Content{&sdk.TextContent{Text: errorText(te)}}
	e := map[string]any{"code": te.Code, "message": te.Message}
	if wc, ok := server.WireCodeOf(te.Code); ok && string(wc) != string(te.Code) {
		e["wireCode"] = wc
	}
	if len(te.Issues) > 0 {
		e["issues"] = te.Issues
	}
	if len(te.Details) > 0 {
		e["details"] = te.Details
	}
	meta[MetaError] = e
	return res, nil
}

// errorText is what the model reads: the code, the message and the
// validation issues, one per line.
func errorText(te *toolerr.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", te.Code, te.Message)
	const maxIssues = 20
	for i, is := range te.Issues {
		if i == maxIssues {
			fmt.Fprintf(&b, "\n(%d more issues)", len(te.Issues)-maxIssues)
			break
		}
		loc := is.InstancePath
		if loc == "" {
			loc = "/"
		}
		fmt.Fprintf(&b, "\n- at %s: %s", loc, is.Message)
		for _, k := range issueProperties {
			if name, ok := is.Params[k].(string); ok && !strings.Contains(is.Message, "'"+name+"'") && !strings.Contains(is.Message, strconv.Quote(name)) {
				fmt.Fprintf(&b, " (%s %q)", k, name)
			}
		}
	}
	return b.String()
}

// issueProperties are the Ajv params that name a property: an issue line
// names it, so "must NOT have additional properties" says which.
var issueProperties = []string{"additionalProperty", "missingProperty", "propertyName"}

func isObject(b json.RawMessage) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
