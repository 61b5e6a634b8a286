package conformance

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// mcpToolName is the MCP tool name rule sandboxd mcp applies (mcp.ToolFor;
// TestMCPRefusalAgrees in cmd/sandboxd keeps the two in step).
var mcpToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// MCPRefusal says why sandboxd mcp cannot serve a tool with this id and
// input schema, or "" when it can: the id must be an MCP tool name (1 to
// 128 of A-Z a-z 0-9 _ . -) and the input schema's root {"type":
// "object"}. Conformance reports it as an "mcp" warning: the tool passes
// and serve runs it, but sandboxd mcp refuses to boot with it.
func MCPRefusal(id string, input json.RawMessage) string {
	if !mcpToolName.MatchString(id) {
		return fmt.Sprintf("the id %q is not an MCP tool name (1-128 characters of A-Z a-z 0-9 _ . -; e.g. %q)", id, suggestMCPName(id))
	}
	var root struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(input, &root) != nil || root.Type != "object" {
		return `the input schema's root is not {"type": "object"}, which MCP requires of inputSchema (wrap the value in an object property)`
	}
	return ""
}

// suggestMCPName replaces every character outside the MCP name rule by '-'.
func suggestMCPName(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	if len(b) == 0 {
		return "my-tool"
	}
	return string(b)
}
