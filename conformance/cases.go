package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// MaxCaseFileSize caps a case file; a larger one is refused unread.
const MaxCaseFileSize = 8 << 20

// MaxCaseTimeout caps a case's timeoutMs.
const MaxCaseTimeout = 10 * time.Minute

// CaseFile is one *.cases.json file: the behavioural cases of one tool, or
// of one guardrail check. See docs/conformance.md.
type CaseFile struct {
	// Tool is the id of the tool the cases are for; Check, instead, the id
	// of a guardrail check (its checkId, else its guardrail id). Exactly
	// one is set.
	Tool  string `json:"tool,omitempty"`
	Check string `json:"check,omitempty"`
	Cases []Case `json:"cases"`
}

// Case is one behavioural case: an input and what must come of it.
type Case struct {
	// Name names the case in reports ("case NAME"); unique within the file.
	Name string `json:"name"`
	// Input is the tool input, any JSON value (tool cases only).
	Input json.RawMessage `json:"input,omitempty"`
	// Config and Trace are a check case's check-invoke: the config (default:
	// the guardrail's declared config), validated against its configSchema
	// as sent, and the run trace (required).
	Config json.RawMessage `json:"config,omitempty"`
	Trace  json.RawMessage `json:"trace,omitempty"`
	// Context is the call context; tenantId and runId default to
	// "conformance" and "conformance-<case>".
	Context *CaseContext `json:"context,omitempty"`
	// TimeoutMs is the case's wall deadline (default: Options.CaseTimeout).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Expect is what the call must produce.
	Expect Expect `json:"expect"`
}

// CaseContext is a case's call context: the pack protocol's ctx object.
type CaseContext = executor.CallContext

// Expect is a case's expectation: exactly one of Output (the output must
// equal it as JSON: same structure, numbers compared by value, key order
// ignored), OutputSchema (the output must be valid against this JSON Schema,
// draft 2020-12) or Error (the call must fail with this native code).
type Expect struct {
	Output       json.RawMessage `json:"output,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Error        *ExpectError    `json:"error,omitempty"`

	schema *manifest.Schema
}

// ExpectError is an expected failure: its native code and, optionally, a
// substring its message must contain.
type ExpectError struct {
	Code            string `json:"code"`
	MessageContains string `json:"messageContains,omitempty"`
}

// ParseCaseFile decodes and checks a case file: unknown fields, duplicate
// or empty case names, a missing input, an expectation that is not exactly
// one of output/outputSchema/error, an unknown error code or an
// outputSchema that does not compile are all errors naming the case.
func ParseCaseFile(data []byte) (*CaseFile, error) {
	if len(data) > MaxCaseFileSize {
		return nil, fmt.Errorf("case file is %d bytes, over the %d-byte cap", len(data), MaxCaseFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cf CaseFile
	if err := dec.Decode(&cf); err != nil {
		return nil, fmt.Errorf("not a case file: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a case file: data after the JSON object")
	}
	if (cf.Tool == "") == (cf.Check == "") {
		return nil, errors.New(`a case file names exactly one of "tool" (a tool id) or "check" (a guardrail check id)`)
	}
	seen := map[string]bool{}
	for i := range cf.Cases {
		c := &cf.Cases[i]
		if c.Name == "" {
			return nil, fmt.Errorf("cases[%d]: \"name\" is missing", i)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("cases[%d]: duplicate case name %q", i, c.Name)
		}
		seen[c.Name] = true
		switch {
		case cf.Tool != "" && len(c.Input) == 0:
			return nil, fmt.Errorf("case %q: \"input\" is missing", c.Name)
		case cf.Tool != "" && (len(c.Config) > 0 || len(c.Trace) > 0):
			return nil, fmt.Errorf("case %q: \"config\" and \"trace\" are for check cases; a tool case has \"input\"", c.Name)
		case cf.Check != "" && len(c.Input) > 0:
			return nil, fmt.Errorf("case %q: a check case has \"config\" and \"trace\", not \"input\"", c.Name)
		case cf.Check != "" && len(c.Trace) == 0:
			return nil, fmt.Errorf("case %q: \"trace\" is missing", c.Name)
		}
		if c.TimeoutMs < 0 || time.Duration(c.TimeoutMs)*time.Millisecond > MaxCaseTimeout {
			return nil, fmt.Errorf("case %q: timeoutMs %d is outside 0..%d", c.Name, c.TimeoutMs, MaxCaseTimeout.Milliseconds())
		}
		n := 0
		if len(c.Expect.Output) > 0 {
			n++
		}
		if len(c.Expect.OutputSchema) > 0 {
			n++
		}
		if c.Expect.Error != nil {
			n++
		}
		if n != 1 {
			return nil, fmt.Errorf("case %q: \"expect\" needs exactly one of output, outputSchema, error (has %d)", c.Name, n)
		}
		if e := c.Expect.Error; e != nil && !knownCode(e.Code) {
			return nil, fmt.Errorf("case %q: expect.error.code %q is not a sandboxd error code", c.Name, e.Code)
		}
		if len(c.Expect.OutputSchema) > 0 {
			s, err := manifest.CompileSchema("/expect/outputSchema", c.Expect.OutputSchema)
			if err != nil {
				return nil, fmt.Errorf("case %q: %s", c.Name, toolerr.As(err).Message)
			}
			c.Expect.schema = s
		}
	}
	return &cf, nil
}

func readCaseFile(path string) (*CaseFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCaseFileSize+1))
	if err != nil {
		return nil, err
	}
	return ParseCaseFile(b)
}

func knownCode(c string) bool {
	for _, k := range toolerr.Codes {
		if string(k) == c {
			return true
		}
	}
	return false
}

func (c *Case) callContext() executor.CallContext {
	var cc executor.CallContext
	if c.Context != nil {
		cc = *c.Context
	}
	return cc.WithDefaults("conformance", "conformance-"+c.Name)
}

// sameJSON reports whether a and b are the same JSON value (objects
// compared by key, numbers by value).
func sameJSON(a, b []byte) bool {
	va, err1 := decodeAny(a)
	vb, err2 := decodeAny(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return equalJSON(va, vb)
}

func decodeAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, ok1 := new(big.Rat).SetString(string(x))
		rb, ok2 := new(big.Rat).SetString(string(y))
		return ok1 && ok2 && ra.Cmp(rb) == 0
	default:
		return a == b
	}
}

// compact renders a JSON value on one line, cut at n bytes, for reasons.
func compact(b []byte, n int) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		buf.Reset()
		buf.Write(b)
	}
	s := buf.String()
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
