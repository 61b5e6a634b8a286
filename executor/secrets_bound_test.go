package executor_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestSecretsValidationBoundedByDeadline: the declared secrets' values
// were validated against needsSpec.secrets on the default work budget,
// with no deadline and no CPU charge, before the guest: 60 secrets under
// the G01 schema's item (about 670,000 subschemas per value) took seconds
// past the call's deadline. They are now validated metered: stopped at the
// deadline, over the work budget input-validation-failed naming it.
func TestSecretsValidationBoundedByDeadline(t *testing.T) {
	e := newExecutor(t)
	item := sandboxtest.G01Schema()["items"].(map[string]any)
	item["$defs"] = sandboxtest.G01Schema()["$defs"]
	secrets, given := map[string]any{}, map[string]string{}
	for i := range 60 {
		name := fmt.Sprintf("S%02d", i)
		secrets[name], given[name] = item, "a-secret"
	}
	heavy := func(cpuMs int) *executor.Tool {
		return load(t, e, "echo_reactor", func(m map[string]any) {
			m["needsSpec"] = map[string]any{"secrets": secrets}
			m["limits"] = map[string]any{"memMB": 16, "cpuMs": cpuMs}
		})
	}
	req := executor.Request{Input: []byte(`{}`), Context: executor.CallContext{Secrets: given}}
	const deadline, grace = 500 * time.Millisecond, 150 * time.Millisecond
	tool := heavy(300000)
	var err error
	took := sandboxtest.Timed(func() { // a loaded machine: the thread's own time
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, err = tool.Invoke(ctx, req)
	})
	wantCode(t, err, toolerr.DeadlineExceeded)
	if took > deadline+grace {
		t.Fatalf("secrets validated for %v (deadline %v)", took, deadline)
	}
	_, err = heavy(100).Invoke(context.Background(), req)
	if te := wantCode(t, err, toolerr.InputValidationFailed); te.Details["budget"] != "validationWork" || strings.Contains(te.Message, "a-secret") {
		t.Fatalf("details %v, message %q", te.Details, te.Message)
	}
}

// checkSecrets compiled every declared secret's schema at every call
// (manifest.CompileSchema, hundreds of allocations for a schema with a few
// patterns and combinators): work bounded by the manifest, not by the call,
// and unmetered. The schemas are now compiled once, at load, like env's and
// config's: 24 secrets under such a schema cost a call only their
// validation (a few dozen allocations each, against the compile's
// hundreds), with the same answers: a valid set passes, an invalid or a
// missing value is input-validation-failed naming /ctx/secrets without the
// value, and an invalid schema is refused when the tool loads.
func TestSecretSchemasCompiledAtLoad(t *testing.T) {
	e := newExecutor(t)
	schema := map[string]any{
		"type": "string", "minLength": 8, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$",
		"not":   map[string]any{"enum": []any{"changeme-please", "password-1234"}},
		"anyOf": []any{map[string]any{"pattern": "^sk-"}, map[string]any{"pattern": "^pk_"}, map[string]any{"minLength": 40}},
	}
	const count = 24
	secrets, given := map[string]any{}, map[string]string{}
	for i := range count {
		name := fmt.Sprintf("S%02d", i)
		secrets[name], given[name] = schema, fmt.Sprintf("sk-value-%02d", i)
	}
	loadWith := func(spec map[string]any) *executor.Tool {
		return load(t, e, "echo_reactor", func(m map[string]any) {
			m["sandbox"] = "none" // a warm instance: the call's own work is what is counted
			if spec != nil {
				m["needsSpec"] = map[string]any{"secrets": spec}
			}
		})
	}
	withSecrets, plain := loadWith(secrets), loadWith(nil)
	req := executor.Request{Input: []byte(`{}`), Context: executor.CallContext{Secrets: given}}
	allocs := func(tool *executor.Tool) float64 {
		if _, err := tool.Invoke(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(50, func() {
			if _, err := tool.Invoke(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		})
	}
	a, b := allocs(withSecrets), allocs(plain)
	per := (a - b) / count
	t.Logf("allocations per call: %.0f with %d declared secrets, %.0f with none: %.1f per secret", a, count, b, per)
	if per > 60 {
		t.Errorf("%.1f allocations per declared secret and call (%.0f vs %.0f): is its schema compiled per call?", per, a, b)
	}

	bad := maps.Clone(given)
	bad["S07"] = "sk-not/valid"
	delete(bad, "S11")
	_, err := withSecrets.Invoke(context.Background(), executor.Request{Input: []byte(`{}`), Context: executor.CallContext{Secrets: bad}})
	te := wantCode(t, err, toolerr.InputValidationFailed)
	paths := map[string]bool{}
	for _, is := range te.Issues {
		paths[is.InstancePath+" "+is.Keyword] = true
	}
	if !paths["/ctx/secrets/S07 pattern"] || !paths["/ctx/secrets required"] || len(te.Issues) != 2 || strings.Contains(fmt.Sprint(te), "sk-not/valid") {
		t.Fatalf("issues %+v (%s)", te.Issues, te.Message)
	}

	_, err = e.Load(context.Background(), manifestFor(t, "echo_reactor", func(m map[string]any) {
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"S": map[string]any{"type": 5}}}
	}))
	if te := wantCode(t, err, toolerr.InvalidToolDefinition); te.Details["pointer"] == nil || !strings.Contains(fmt.Sprint(te.Details["pointer"]), "/needsSpec/secrets/S") {
		t.Fatalf("details %v: %s", te.Details, te.Message)
	}
}
