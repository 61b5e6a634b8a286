package sdk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type minLengthConfig struct {
	MinLength int `json:"minLength"`
}

func minLength(_ *Context, cfg minLengthConfig, tr Trace) (CheckResult, error) {
	if cfg.MinLength < 0 {
		return CheckResult{}, errors.New("minLength must not be negative")
	}
	n := len([]rune(tr.OutputText()))
	if n < cfg.MinLength {
		return CheckResult{Passed: false, Reason: "output too short", Attributes: map[string]any{"length": n}}, nil
	}
	return CheckResult{Passed: true}, nil
}

func TestHandleCheck(t *testing.T) {
	registered = nil
	HandleCheck(minLength)
	t.Cleanup(func() { registered = nil })
	for _, tc := range []struct{ name, in, want, err string }{
		{"passes", `{"config":{"minLength":1},"trace":{"runId":"r","tenantId":"t","output":"Recorded.","toolCalls":[],"toolResults":[],"modelCalls":[],"mode":"runtime"}}`,
			`{"passed":true}`, ""},
		{"fails with reason", `{"config":{"minLength":20},"trace":{"output":"Recorded."}}`,
			`{"passed":false,"reason":"output too short","attributes":{"length":9}}`, ""},
		{"object output counts its JSON", `{"config":{"minLength":8},"trace":{"output":{"a":1}}}`,
			`{"passed":false,"reason":"output too short","attributes":{"length":7}}`, ""},
		{"error", `{"config":{"minLength":-1},"trace":null}`, "", "minLength must not be negative"},
		{"bad config", `{"config":{"minLength":"x"},"trace":null}`, "", "sdk: decoding input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Invoke([]byte(tc.in), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Invoke = %s, %v; want an error containing %q", out, err, tc.err)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Fatalf("Invoke = %s, %v; want %s", out, err, tc.want)
			}
		})
	}
}

func TestCheckResultAlwaysSendsPassed(t *testing.T) {
	b, _ := json.Marshal(CheckResult{})
	if string(b) != `{"passed":false}` {
		t.Fatalf("zero CheckResult = %s", b)
	}
}
