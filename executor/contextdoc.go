package executor

import (
	"encoding/json"
	"slices"
)

func contextJSON(cc *CallContext, env map[string]string) []byte {
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
	settings := validRaw(cc.Settings)
	if b, ok := appendContextJSON(nil, cc, settings, env); ok {
		return b
	}
	b, _ := json.Marshal(ctxDoc{cc.TenantID, cc.RunID, cc.RequestID, cc.ProjectID, cc.OrgID, cc.IdempotencyKey, settings, env})
	return b
}

func validRaw(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || !json.Valid(r) {
		return nil
	}
	return r
}

// appendContextJSON writes what contextJSON's json.Marshal writes when no
// string needs escaping and there are no settings; ok is false otherwise
// (json.Marshal then does it).
func appendContextJSON(b []byte, cc *CallContext, settings json.RawMessage, env map[string]string) (_ []byte, ok bool) {
	if len(settings) > 0 || len(env) > 8 {
		return nil, false
	}
	for _, v := range [...]string{cc.TenantID, cc.RunID, cc.RequestID, cc.ProjectID, cc.OrgID, cc.IdempotencyKey} {
		if !plainJSONString(v) {
			return nil, false
		}
	}
	var keys [8]string
	names := keys[:0]
	for k, v := range env {
		if !plainJSONString(k) || !plainJSONString(v) {
			return nil, false
		}
		names = append(names, k)
	}
	slices.Sort(names)
	if b == nil { // one allocation of the exact size
		n := len(`{"tenantId":"","runId":"","env":{}}`) + len(cc.TenantID) + len(cc.RunID)
		for _, f := range [...]struct{ name, v string }{{"requestId", cc.RequestID}, {"projectId", cc.ProjectID}, {"orgId", cc.OrgID}, {"idempotencyKey", cc.IdempotencyKey}} {
			if f.v != "" {
				n += len(`,"":""`) + len(f.name) + len(f.v)
			}
		}
		for _, k := range names {
			n += len(`,"":""`) + len(k) + len(env[k])
		}
		if len(names) > 0 {
			n-- // the first entry has no comma
		}
		if env == nil {
			n += len("null") - len("{}")
		}
		b = make([]byte, 0, n)
	}
	b = append(b, '{')
	b = appendField(b, "tenantId", cc.TenantID, true)
	b = appendField(b, "runId", cc.RunID, true)
	b = appendField(b, "requestId", cc.RequestID, false)
	b = appendField(b, "projectId", cc.ProjectID, false)
	b = appendField(b, "orgId", cc.OrgID, false)
	b = appendField(b, "idempotencyKey", cc.IdempotencyKey, false)
	if env == nil {
		return append(b, `,"env":null}`...), true
	}
	b = append(b, `,"env":{`...)
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, env[k]...)
		b = append(b, '"')
	}
	return append(b, "}}"...), true
}

// appendField appends "name":"v" to the object b has open (a comma first
// unless it is the first member); an empty v is left out unless always.
func appendField(b []byte, name, v string, always bool) []byte {
	if v == "" && !always {
		return b
	}
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// plainJSONString reports whether json.Marshal writes s as is between
// quotes: printable ASCII without '"', '\\' or HTML's <, > and &.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
