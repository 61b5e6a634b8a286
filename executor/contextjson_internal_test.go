package executor

import (
	"encoding/json"
	"testing"
)

// contextJSON's hand-written fast path writes exactly what the
// json.Marshal fallback writes.
func TestContextJSONMatchesMarshal(t *testing.T) {
	type ctxDoc struct {
		TenantID       string            `json:"tenantId"`
		RunID          string            `json:"runId"`
		RequestID      string            `json:"requestId,omitempty"`
		ProjectID      string            `json:"projectId,omitempty"`
		OrgID          string            `json:"orgId,omitempty"`
		IdempotencyKey string            `json:"idempotencyKey,omitempty"`
		Settings       json.RawMessage   `json:"settings,omitempty"`
		Env            map[string]string `json:"env"`
	}
	strs := []string{"", "t1", "run-42", "a b~", "é", "<x>", "a&b", `q"`, `back\slash`, "\x01", "\x7f", "line\n"}
	envs := []map[string]string{nil, {}, {"B": "2", "A": "1"}, {"K": "<v>"}, {"Z": "z", "M": "m", "A": ""}}
	n := 0
	for i, a := range strs {
		for j, b := range strs {
			for k, env := range envs {
				cc := CallContext{TenantID: a, RunID: b, RequestID: strs[(i+j)%len(strs)], ProjectID: strs[(i+k)%len(strs)],
					OrgID: strs[(j+k)%len(strs)], IdempotencyKey: strs[(i+j+k)%len(strs)]}
				if k == 3 && i == 1 {
					cc.Settings = json.RawMessage(`{"x": 1}`)
				}
				want, _ := json.Marshal(ctxDoc{cc.TenantID, cc.RunID, cc.RequestID, cc.ProjectID, cc.OrgID, cc.IdempotencyKey, validRaw(cc.Settings), env})
				if got := contextJSON(&cc, env); string(got) != string(want) {
					t.Fatalf("contextJSON(%+v, %v) = %s, want %s", cc, env, got, want)
				}
				if b, ok := appendContextJSON(nil, &cc, validRaw(cc.Settings), env); ok {
					n++
					if cap(b) != len(b) { // sized exactly: one allocation
						t.Fatalf("appendContextJSON(%+v, %v): %d bytes in a buffer of %d", cc, env, len(b), cap(b))
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the fast path never ran")
	}
}
