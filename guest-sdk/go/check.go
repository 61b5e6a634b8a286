package sdk

import "encoding/json"

// CheckResult is a guardrail check's verdict: Kindgi's CheckResult, the
// result of a check-invoke. Passed is always sent; the rest only when set.
type CheckResult struct {
	Passed        bool           `json:"passed"`
	Reason        string         `json:"reason,omitempty"`
	JudgeResponse string         `json:"judgeResponse,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
}

// Trace is the run trace a check evaluates: Kindgi's RunTrace. Output is
// the run's final output as JSON (often a JSON string; see OutputText).
// Fields the runtime adds later are ignored.
type Trace struct {
	RunID            string          `json:"runId"`
	TenantID         string          `json:"tenantId"`
	ProjectID        string          `json:"projectId,omitempty"`
	OrgID            string          `json:"orgId,omitempty"`
	AgentID          string          `json:"agentId,omitempty"`
	FlowID           string          `json:"flowId,omitempty"`
	Mode             string          `json:"mode"`
	Output           json.RawMessage `json:"output,omitempty"`
	UserInput        json.RawMessage `json:"userInput,omitempty"`
	ToolCalls        []TraceToolCall `json:"toolCalls"`
	ToolResults      []TraceResult   `json:"toolResults"`
	ModelCalls       []TraceModel    `json:"modelCalls"`
	RetrievedFactIDs []string        `json:"retrievedFactIds,omitempty"`
	ConversationID   string          `json:"conversationId,omitempty"`
	TurnNumber       int             `json:"turnNumber,omitempty"`
	TotalCostUSD     float64         `json:"totalCostUsd,omitempty"`
	DurationMs       float64         `json:"durationMs,omitempty"`
	Attributes       map[string]any  `json:"attributes,omitempty"`
}

// TraceToolCall is one tool call of a run trace.
type TraceToolCall struct {
	ToolID    string          `json:"toolId"`
	ToolName  string          `json:"toolName"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	At        string          `json:"at"`
}

// TraceResult is one tool result of a run trace.
type TraceResult struct {
	ToolCallID string          `json:"toolCallId"`
	Output     json.RawMessage `json:"output,omitempty"`
	At         string          `json:"at"`
}

// TraceModel is one model call of a run trace.
type TraceModel struct {
	ProviderID       string `json:"providerId"`
	Model            string `json:"model"`
	PromptTokens     int    `json:"promptTokens"`
	CompletionTokens int    `json:"completionTokens"`
	At               string `json:"at"`
}

// OutputText returns the trace's output as text: the string itself when
// it is a JSON string, else its JSON ("" when absent or null).
func (t Trace) OutputText() string {
	if len(t.Output) == 0 || string(t.Output) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(t.Output, &s) == nil {
		return s
	}
	return string(t.Output)
}

// checkInput is the input sandboxd gives a check handler.
type checkInput[Config any] struct {
	Config Config `json:"config"`
	Trace  Trace  `json:"trace"`
}

// HandleCheck registers fn as the module's guardrail check, in one line:
//
//	func init() { sdk.HandleCheck(minLength) }
//
// sandboxd runs a check as a tool whose input is {"config", "trace"} (the
// config already validated against the guardrail's configSchema, as sent)
// and whose output must be a CheckResult; fn receives the config decoded
// into Config and the trace. An error from fn fails the check-invoke
// (handler-throw on the wire); a failing check is a result with Passed
// false, not an error. It is Handle for checks, with the same rules.
func HandleCheck[Config any](fn func(ctx *Context, config Config, trace Trace) (CheckResult, error)) {
	if fn == nil {
		panic("sdk: HandleCheck called with a nil function")
	}
	Handle(func(c *Context, in checkInput[Config]) (CheckResult, error) {
		return fn(c, in.Config, in.Trace)
	})
}
