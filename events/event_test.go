package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
)

// echoWithMapping is the bundled echo tool annotated as a read tool whose
// message is projected as description.
func echoWithMapping(t *testing.T) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(examples.EchoManifest, &m); err != nil {
		t.Fatal(err)
	}
	m["metadata"] = map[string]any{"x.ai/tool": map[string]any{"kind": "read", "input": map[string]any{"description": "/message", "limit": "/repeat"}}}
	b, _ := json.Marshal(m)
	return b
}

func lines(t *testing.T, b []byte) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// A real call through the executor: pending → in_progress → completed, one
// toolCallId, input projected only after validation (defaults filled); a
// call whose input fails validation ends failed without an envelope.
func TestRecorderLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a guest over 1 MiB (examples/echo/handler.wasm, a standard-Go build); compiling it takes seconds")
	}
	var buf bytes.Buffer
	rec := events.NewRecorder(&buf)
	ctx := context.Background()
	exec, err := executor.New(ctx, executor.NewConfig().WithCacheDir("").WithCallObserver(rec.Observe))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close(ctx)
	tool, err := exec.Load(ctx, echoWithMapping(t), executor.WithModule(examples.EchoWasm))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Invoke(ctx, executor.Request{CallID: "call_1", Input: []byte(`{"message":"hi"}`),
		Context: executor.CallContext{TenantID: "t1", RunID: "r1", RequestID: "q1"}}); err != nil {
		t.Fatal(err)
	}
	evs := lines(t, buf.Bytes())
	if len(evs) != 3 {
		t.Fatalf("%d events: %s", len(evs), buf.Bytes())
	}
	for i, want := range []string{"pending", "in_progress", "completed"} {
		if got := string(evs[i]["status"]); got != `"`+want+`"` {
			t.Errorf("event %d status %s, want %s", i, got, want)
		}
		if string(evs[i]["toolCallId"]) != `"call_1"` || string(evs[i]["tenantId"]) != `"t1"` || string(evs[i]["runId"]) != `"r1"` {
			t.Errorf("event %d: %s", i, buf.Bytes())
		}
	}
	meta := func(i int) string { return string(evs[i]["_meta"]) }
	if want := `{"x.ai/tool":{"version":1,"name":"acme.echo","kind":"read","namespace":"mcp","label":"Read","read_only":true}}`; meta(0) != want {
		t.Errorf("pending _meta %s, want %s", meta(0), want)
	}
	// repeat's default (1) was filled by validation before the projection.
	want := `{"x.ai/tool":{"version":1,"name":"acme.echo","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"limit":1,"description":"hi"}}}`
	if meta(1) != want || meta(2) != want {
		t.Errorf("in_progress/completed _meta:\n%s\n%s\nwant %s", meta(1), meta(2), want)
	}
	if evs[2]["usage"] == nil || evs[0]["usage"] != nil {
		t.Errorf("usage only on completed: %s", buf.Bytes())
	}
	// Key order of a record is fixed.
	first := strings.SplitN(buf.String(), "\n", 2)[0]
	if !strings.HasPrefix(first, `{"toolCallId":"call_1","status":"pending","tool":"acme.echo","time":`) {
		t.Errorf("field order: %s", first)
	}

	buf.Reset()
	if _, err := tool.Invoke(ctx, executor.Request{CallID: "call_2", Input: []byte(`{"nope":1}`), Context: executor.CallContext{TenantID: "t1", RunID: "r1"}}); err == nil {
		t.Fatal("invalid input accepted")
	}
	evs = lines(t, buf.Bytes())
	if len(evs) != 2 || string(evs[1]["status"]) != `"failed"` {
		t.Fatalf("events: %s", buf.Bytes())
	}
	if evs[1]["_meta"] != nil {
		t.Errorf("a failed parse carries an envelope: %s", evs[1]["_meta"])
	}
	if !strings.Contains(string(evs[1]["error"]), `"input-validation-failed"`) {
		t.Errorf("error: %s", evs[1]["error"])
	}
}

func TestOpenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events.jsonl")
	rec, err := events.Open(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.Write(events.Event{ToolCallID: "c", Status: "pending", Tool: "x"})
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !strings.HasPrefix(string(b), `{"toolCallId":"c","status":"pending","tool":"x"`) || !strings.HasSuffix(string(b), "}\n") {
		t.Fatalf("file: %q", b)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	if _, err := events.Open(filepath.Join(p, "sub", "x"), nil); err == nil {
		t.Error("opening under a file succeeded")
	}
	var out bytes.Buffer
	rec, _ = events.Open("-", &out)
	rec.Write(events.Event{ToolCallID: "d"})
	if !strings.Contains(out.String(), `"d"`) {
		t.Error("- does not write to stdout")
	}
}
