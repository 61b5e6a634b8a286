package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// fairCall posts one call of tenant and reports whether it ran (an answer
// of the tool, even an error) or was refused (503 / JSON-RPC -32000 with
// its reason).
type fairCall func(tenant string) (ran bool, refusal string, err error)

// TestServeFairAdmission runs issue 25's measurement on the real binary
// (serve --max-concurrency 4 with the default per-tenant ceilings): tenant
// A floods one tool from 24 connections, tenant B calls the same tool
// every 50 ms, through the pack protocol and through MCP (tenant: the
// Sandboxd-Tenant header). None of B's calls is refused, B's p99 grows by
// at most 150 ms over B alone (with the sleeping tool; the CPU-spending
// tool's figures are logged), and A is refused with tenant-queue-full.
// SANDBOXD_BIN runs another build instead (e.g. one from before fair
// admission, to compare).
func TestServeFairAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := os.Getenv("SANDBOXD_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "sandboxd")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	tools := t.TempDir()
	for name, fx := range map[string]string{"sleep": "sleep", "spin": "loop"} {
		cpu := 10000
		if name == "spin" {
			cpu = 60 // spends its 60 ms of CPU, then limits-exceeded
		}
		b, _ := os.ReadFile(writeManifest(t, fx, map[string]any{"id": "t." + name, "limits": map[string]any{"memMB": 16, "cpuMs": cpu}}))
		_ = os.WriteFile(filepath.Join(tools, name+".tool.json"), b, 0o644)
	}
	cmd := exec.Command(bin, "serve", "--tools", tools, "--dev", "--cache-dir", sandboxtest.CacheDir(t), "--max-concurrency", "4", "--mcp")
	cmd.Env = append(os.Environ(), tokenEnv+"=tok", "PORT=0")
	var stderr sandboxtest.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var port int
	for deadline := time.Now().Add(60 * time.Second); port == 0; time.Sleep(20 * time.Millisecond) {
		if ev := processEvents(t, stderr.String(), "listening"); len(ev) == 1 {
			port = int(ev[0]["port"].(float64))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening event: %s", stderr.String())
		}
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	send := func(req *http.Request) (int, http.Header, string, error) {
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b), err
	}
	pack := func(tool string) fairCall {
		return func(tenant string) (bool, string, error) {
			req, _ := http.NewRequest("POST", base+"/v1/invoke", strings.NewReader(
				fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":%q},"input":{},"ctx":{"tenantId":%q,"runId":"r"}}`, tool, tenant)))
			req.Header.Set("content-type", "application/json")
			req.Header.Set("kindgi-pack-token", "tok")
			st, h, body, err := send(req)
			switch {
			case err != nil:
				return false, "", err
			case st == 200:
				return true, "", nil
			case st == 503 && h.Get("Retry-After") != "":
				why := h.Get("sandboxd-refusal")
				if why == "" {
					why = strings.TrimSpace(body)
				}
				return false, why, nil
			}
			return false, "", fmt.Errorf("%d %s", st, body)
		}
	}
	viaMCP := func(tool string) fairCall {
		return func(tenant string) (bool, string, error) {
			req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(fmt.Sprintf(
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, tool)))
			for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
				"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool, "Authorization": "Bearer tok", "Sandboxd-Tenant": tenant} {
				req.Header.Set(k, v)
			}
			st, _, body, err := send(req)
			switch {
			case err != nil:
				return false, "", err
			case st == 200 && strings.Contains(body, `"code":-32000`):
				_, why, _ := strings.Cut(body, `"reason":"`)
				why, _, _ = strings.Cut(why, `"`)
				return false, why, nil
			case st == 200 && strings.Contains(body, `"result"`):
				return true, "", nil
			}
			return false, "", fmt.Errorf("%d %.300s", st, body)
		}
	}
	for _, tc := range []struct {
		name   string
		call   fairCall
		every  time.Duration
		assert bool // the latency bound (the sleeping tool)
	}{
		{"pack/sleep", pack("t.sleep"), 50 * time.Millisecond, true},
		{"mcp/sleep", viaMCP("t.sleep"), 50 * time.Millisecond, true},
		// 60 ms of CPU every 50 ms would be more than one core of a
		// loaded machine for B alone: B calls it every 150 ms.
		{"pack/cpu", pack("t.spin"), 150 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The figures depend on the machine's load as well as on
			// admission: the run is measured up to three times and must
			// meet every bound once (sandboxtest.Attempts).
			sandboxtest.Attempts(t, 3, func() []string {
				problems := fairnessAttempt(t, tc.name, tc.call, tc.every)
				if !tc.assert {
					return nil // the CPU tool's figures are logged only
				}
				return problems
			})
		})
	}
	if m := metrics(base); !strings.Contains(m, `sandboxd_admission_refused_total{reason="tenant-queue-full"}`) || strings.Contains(m, "tenant-a") {
		t.Errorf("metrics: %s", grepLines(m, "admission"))
	}
}

// fairnessAttempt measures B alone, then A's flood (24 clients) and B
// under it; it returns the bounds missed.
func fairnessAttempt(t *testing.T, name string, call fairCall, every time.Duration) (problems []string) {
	b := func() (bool, string, error) { return call("tenant-b") }
	lat, refusedAlone := sandboxtest.Paced(t, 40, every, b)
	if refusedAlone > 0 {
		return []string{fmt.Sprintf("%d of B's calls refused with nobody else calling", refusedAlone)}
	}
	alone := sandboxtest.P99(lat)
	fl := sandboxtest.StartFlood(t, 24, func() (bool, string, error) { return call("tenant-a") })
	defer fl.Stop()
	for deadline := time.Now().Add(30 * time.Second); fl.Refused() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return []string{"the flood was never refused"}
		}
	}
	lat, refused := sandboxtest.Paced(t, 40, every, b)
	flooded := sandboxtest.P99(lat)
	t.Logf("%s: B p99 alone %v, under A's flood %v; B refused %d of 40; A ran %d, refused %d (%s)",
		name, alone, flooded, refused, fl.Ran(), fl.Refused(), strings.Join(fl.Reasons(), ", "))
	if refused > 0 {
		problems = append(problems, fmt.Sprintf("%d of B's calls refused under A's flood", refused))
	}
	if flooded > alone+150*time.Millisecond {
		problems = append(problems, fmt.Sprintf("B's p99 under A's flood is %v, over alone (%v) + 150ms", flooded, alone))
	}
	return problems
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
