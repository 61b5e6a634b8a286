package manifest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Tool is a manifest whose input and output schemas are compiled. A Tool is
// immutable: its methods are safe for concurrent use by many goroutines and
// never recompile anything.
type Tool struct {
	*Manifest
	input, output *Schema
}

// Load parses data (see Parse) and compiles the input and output schemas.
//
// The schemas are JSON Schema draft 2020-12, except when the manifest's
// transport is "mcp": an MCP server's schemas are in the dialect their own
// $schema declares (draft-06, draft-07, 2019-09 or 2020-12; 2020-12 when
// absent). Any other $schema is refused. Remote references ($ref to
// http, https, file or any other URL outside the schema document) are never
// fetched and make the schema invalid. Format assertions are on (as Ajv with
// ajv-formats), content assertions (contentEncoding, contentMediaType) off.
//
// A schema that does not compile is a *toolerr.Error with Code
// toolerr.InvalidToolDefinition whose message contains the JSON Pointer of
// the problem in the manifest ("/input/properties/a/type") and whose
// Details["pointer"] is that pointer.
func Load(data []byte) (*Tool, error) {
	m, obj, err := parse(data)
	if err != nil {
		return nil, err
	}
	rule := only2020
	if m.Transport == "mcp" {
		rule = mcpDialects
	}
	t := &Tool{Manifest: m}
	if t.input, err = compileSchema("/input", obj["input"], rule); err != nil {
		return nil, toolerr.As(err).WithTool(m.ID)
	}
	if t.output, err = compileSchema("/output", obj["output"], rule); err != nil {
		return nil, toolerr.As(err).WithTool(m.ID)
	}
	return t, nil
}

// InputSchema returns the compiled input schema.
func (t *Tool) InputSchema() *Schema { return t.input }

// OutputSchema returns the compiled output schema.
func (t *Tool) OutputSchema() *Schema { return t.output }

// ValidateInput validates input, which must be exactly one JSON value,
// against the input schema after filling schema defaults as Ajv's
// useDefaults does (missing properties whose schema under `properties` has
// a `default`, nested objects and array items too, through $ref and allOf,
// never inside anyOf, oneOf, not, if, then or else).
//
// It returns the JSON the handler must see: input itself (the same slice,
// not re-encoded) when no default was filled, else the re-encoded document
// (see Schema.Validate, which also re-encodes input repeating a key).
//
// Failure is a *toolerr.Error with Code toolerr.InputValidationFailed and
// Ajv-shaped Issues; input that is not JSON gets one issue with an empty
// keyword whose message says why.
func (t *Tool) ValidateInput(input []byte) ([]byte, error) {
	return t.ValidateInputWithin(input, DefaultValidationBudget)
}

// ValidateInputWithin is ValidateInput holding at most about budget bytes
// (see Schema.ValidateWithin): over it, the input is refused
// (input-validation-failed, errors.Is ErrValidationBudget) before any
// validation work.
func (t *Tool) ValidateInputWithin(input []byte, budget int64) ([]byte, error) {
	return t.ValidateInputLimited(input, budget, Work{})
}

// ValidateInputLimited is ValidateInputWithin spending at most w (see
// Schema.ValidateLimited). Over w.Limit the input is refused with
// input-validation-failed (errors.Is ErrWorkBudget) whose message and
// Details ({"budget": "validationWork", "limit": N, "raise":
// "limits.cpuMs"}) name the budget and what to change; an error from
// w.Check is returned as is.
func (t *Tool) ValidateInputLimited(input []byte, budget int64, w Work) ([]byte, error) {
	out, issues, err := t.input.ValidateLimited(input, true, budget, w)
	if err != nil {
		return nil, validationStopped(toolerr.InputValidationFailed, "input", err).WithTool(t.ID)
	}
	if len(issues) > 0 {
		return nil, invalidValue(toolerr.InputValidationFailed, "input", issues).WithTool(t.ID)
	}
	return out, nil
}

// ValidateOutput validates a handler's output bytes against the output
// schema (no defaults are filled) and returns them trimmed of surrounding
// whitespace. Output that is not exactly one JSON value fails with
// "output is not valid JSON: ..."; a schema violation fails with Ajv-shaped
// Issues. Both are *toolerr.Error with Code toolerr.OutputValidationFailed.
func (t *Tool) ValidateOutput(output []byte) (json.RawMessage, error) {
	return t.ValidateOutputWithin(output, DefaultValidationBudget)
}

// ValidateOutputWithin is ValidateOutput holding at most about budget bytes
// (see Schema.ValidateWithin); the executor passes the call's memMB
// headroom.
func (t *Tool) ValidateOutputWithin(output []byte, budget int64) (json.RawMessage, error) {
	return t.ValidateOutputLimited(output, budget, Work{})
}

// ValidateOutputLimited is ValidateOutputWithin spending at most w (see
// Schema.ValidateLimited): over w.Limit the output is refused with
// output-validation-failed (errors.Is ErrWorkBudget, Details as
// ValidateInputLimited's); an error from w.Check is returned as is.
func (t *Tool) ValidateOutputLimited(output []byte, budget int64, w Work) (json.RawMessage, error) {
	_, issues, err := t.output.ValidateLimited(output, false, budget, w)
	if err != nil {
		return nil, validationStopped(toolerr.OutputValidationFailed, "output", err).WithTool(t.ID)
	}
	if len(issues) > 0 {
		return nil, invalidValue(toolerr.OutputValidationFailed, "output", issues).WithTool(t.ID)
	}
	return json.RawMessage(trimJSONSpace(output)), nil
}

// validationStopped is the error of a validation that did not complete:
// over its work budget (code), stopped by its Check (that error itself,
// as a *toolerr.Error: context errors are deadline-exceeded or
// cancelled), or refused while decoding (notJSON).
func validationStopped(code toolerr.Code, what string, err error) *toolerr.Error {
	var werr *WorkError
	switch {
	case errors.As(err, &werr):
		msg := fmt.Sprintf("%s is refused: %v (%d per ms of limits.cpuMs, at least %d): %s", what, err, WorkPerCPUMs, MinWorkLimit, workLimitHelp)
		return &toolerr.Error{
			Code:    code,
			Message: msg,
			Issues:  []toolerr.Issue{{Params: map[string]any{}, Message: msg}},
			Details: map[string]any{"budget": "validationWork", "limit": werr.Limit, "raise": "limits.cpuMs"},
			Err:     err,
		}
	case errors.As(err, new(*syntaxError)):
		return notJSON(code, what, err)
	}
	return toolerr.As(err)
}

func notJSON(code toolerr.Code, what string, err error) *toolerr.Error {
	msg := jsonProblem(what, err)
	return &toolerr.Error{
		Code:    code,
		Message: msg,
		Issues:  []toolerr.Issue{{Params: map[string]any{}, Message: msg}},
		Err:     err,
	}
}

func invalidValue(code toolerr.Code, what string, issues []toolerr.Issue) *toolerr.Error {
	return &toolerr.Error{Code: code, Message: summarize(what, issues), Issues: issues}
}

func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
