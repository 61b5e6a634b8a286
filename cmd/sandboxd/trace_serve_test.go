package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestServeTracesIntoEgress runs the real binary with --otlp-endpoint at an
// OTLP/HTTP receiver on loopback (decoding ExportTraceServiceRequest) and
// calls a declarative HTTP tool with a Kindgi traceparent: the receiver
// gets tool.invoke (child of the caller's span) with its stage spans and
// the egress client span, and the loopback upstream sees a traceparent
// naming that egress span. With --otlp-no-traceparent for the upstream it
// sees none. SIGTERM flushes the spans.
func TestServeTracesIntoEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	var mu sync.Mutex
	var spans []*tracepb.Span
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			t.Errorf("receiver: %s %d bytes", r.URL.Path, len(b))
			http.Error(w, "bad", 400)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer rc.Close()
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		mu.Unlock()
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()

	bin := filepath.Join(t.TempDir(), "sandboxd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tools := t.TempDir()
	m, _ := json.Marshal(map[string]any{"id": "t.fetch", "version": "1.0.0", "description": "fetches", "input": map[string]any{"type": "object"}, "output": map[string]any{},
		"spec": map[string]any{"kind": "http", "method": "GET", "urlTemplate": up.URL + "/items"}})
	_ = os.WriteFile(filepath.Join(tools, "fetch.tool.json"), m, 0o644)

	run := func(extra ...string) {
		args := append([]string{"serve", "--tools", tools, "--cache-dir", cacheDir(t), "--egress-allow-cidr", "127.0.0.0/8", "--otlp-endpoint", rc.URL}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), tokenEnv+"=tok", "PORT=0")
		stderr, _ := cmd.StderrPipe()
		cmd.Stdout = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		ports := make(chan int, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var ev map[string]any
				if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["kind"] == "listening" {
					ports <- int(ev["port"].(float64))
				}
			}
		}()
		var port int
		select {
		case port = <-ports:
		case <-time.After(60 * time.Second):
			t.Fatal("no listening event")
		}
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/v1/invoke", port), strings.NewReader(`{"v":2,"kind":"invoke","tool":{"id":"t.fetch"},"input":{},"ctx":{"tenantId":"t","runId":"r"}}`))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", "tok")
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), `"kind":"result"`) {
			t.Fatalf("invoke: %d %s", res.StatusCode, body)
		}
		_ = cmd.Process.Signal(os.Interrupt) // drains, then flushes the spans
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("serve exited: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop")
		}
	}

	run()
	mu.Lock()
	byName := map[string]*tracepb.Span{}
	var log strings.Builder
	for _, s := range spans {
		byName[s.Name] = s
		fmt.Fprintf(&log, "  %-17s span %s parent %s\n", s.Name, hex.EncodeToString(s.SpanId), hex.EncodeToString(s.ParentSpanId))
	}
	got := append([]string(nil), seen...)
	spans, seen = nil, nil
	mu.Unlock()
	t.Logf("spans from the binary:\n%s  upstream saw traceparent %q", log.String(), got)
	root, get, run1 := byName["tool.invoke"], byName["GET"], byName["guest.run"]
	if root == nil || get == nil || run1 == nil {
		t.Fatalf("spans %v", log.String())
	}
	if hex.EncodeToString(root.TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(root.ParentSpanId) != "00f067aa0ba902b7" {
		t.Errorf("tool.invoke not the caller's child")
	}
	if hex.EncodeToString(get.ParentSpanId) != hex.EncodeToString(run1.SpanId) {
		t.Errorf("egress span not under guest.run")
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + hex.EncodeToString(get.SpanId) + "-01"; len(got) != 1 || got[0] != want {
		t.Errorf("upstream saw %q, want %q", got, want)
	}

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	run("--otlp-no-traceparent", "127.0.0.1:"+port)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "" {
		t.Errorf("with --otlp-no-traceparent the upstream saw %q", seen)
	}
	if len(spans) == 0 {
		t.Error("no spans with --otlp-no-traceparent")
	}
}
