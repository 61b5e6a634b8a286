package executor

import (
	"encoding/json"

	"github.com/sandboxd/sandboxd/toolerr"
)

// NativeResult is the native success envelope (docs/DESIGN.md "Errors").
type NativeResult struct {
	V      int             `json:"v"`
	Kind   string          `json:"kind"`
	Output json.RawMessage `json:"output"`
	Usage  Usage           `json:"usage"`
}

// NativeError is the native failure envelope.
type NativeError struct {
	V       int             `json:"v"`
	Kind    string          `json:"kind"`
	Code    toolerr.Code    `json:"code"`
	Message string          `json:"message"`
	ToolID  string          `json:"toolId,omitempty"`
	Issues  []toolerr.Issue `json:"issues,omitempty"`
	Details map[string]any  `json:"details,omitempty"`
}

// Envelope returns the native envelope for a call's outcome: a result when
// err is nil, else an error (any error is mapped through toolerr.As).
func Envelope(res *Result, err error) any {
	if err == nil {
		out := res.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		return NativeResult{V: 2, Kind: "result", Output: out, Usage: res.Usage}
	}
	e := toolerr.As(err)
	return NativeError{V: 2, Kind: "error", Code: e.Code, Message: e.Message, ToolID: e.ToolID, Issues: e.Issues, Details: e.Details}
}
