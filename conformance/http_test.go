package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeclarativeHTTPTool checks a spec.kind http tool against a real
// server on loopback (the allowlist names 127.0.0.1, so the egress policy
// lets the call through): no module checks, cases run.
func TestDeclarativeHTTPTool(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"item":%q}`, strings.TrimPrefix(r.URL.Path, "/items/"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	dir := t.TempDir()
	m := map[string]any{
		"id": "acme.items", "version": "1.0.0", "description": "declarative HTTP tool",
		"input":   map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}, "required": []string{"id"}},
		"output":  map[string]any{"type": "object", "required": []string{"item"}},
		"network": map[string]any{"kind": "allowlist", "hosts": []string{"http://" + u.Host}},
		"spec":    map[string]any{"kind": "http", "method": "GET", "urlTemplate": srv.URL + "/items/{id}"},
	}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "items.tool.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "items.cases.json"), []byte(`{"tool":"acme.items","cases":[
		{"name":"fetches","input":{"id":"a1"},"expect":{"output":{"item":"a1"}}}]}`), 0o644)
	rep, err := Run(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Status{}
	for _, c := range rep.Checks {
		got[c.Name] = c.Status
	}
	want := map[string]Status{"artifact": StatusSkip, "module": StatusSkip, "abi": StatusPass, "case fetches": StatusPass,
		"probe input-validation": StatusPass, "probe output-schema": StatusPass}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
	if rep.Failed() {
		var s strings.Builder
		rep.WriteSummary(&s, false)
		t.Errorf("report fails:\n%s", s.String())
	}
}

// TestHangingHandlerIsBounded: a handler that never returns costs a case
// its CPU budget, not the run its life; expecting that error passes.
func TestHangingHandlerIsBounded(t *testing.T) {
	wasm, err := os.ReadFile("../testdata/wasm/loop.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "loop.wasm"), wasm, 0o644)
	m := map[string]any{
		"id": "acme.loop", "version": "1.0.0", "description": "spins forever",
		"input": map[string]any{"type": "object"}, "output": map[string]any{"type": "object"},
		"limits":          map[string]any{"memMB": 16, "cpuMs": 50},
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": "loop.wasm"},
	}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "loop.tool.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "loop.cases.json"), []byte(`{"tool":"acme.loop","cases":[
		{"name":"expects output","input":{},"expect":{"output":{}}},
		{"name":"expects the budget","input":{},"expect":{"error":{"code":"limits-exceeded"}}},
		{"name":"short deadline","input":{},"timeoutMs":20,"expect":{"error":{"code":"deadline-exceeded"}}}]}`), 0o644)
	rep, err := Run(context.Background(), dir, Options{CaseTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Check{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	if c := got["case expects output"]; c.Status != StatusFail || c.Code != "limits-exceeded" {
		t.Errorf("expects output: %+v", c)
	}
	if c := got["case expects the budget"]; c.Status != StatusPass {
		t.Errorf("expects the budget: %+v", c)
	}
	if c := got["case short deadline"]; c.Status != StatusPass {
		t.Errorf("short deadline: %+v", c)
	}
}
