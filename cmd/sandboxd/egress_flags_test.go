package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run: --egress-allow-cidr lets a listed name that resolves to loopback
// through; without it the same call is denied. "localhost" resolves via
// /etc/hosts, never the network.
func TestRunEgressAllowCIDR(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"auth":%t}`, r.Header.Get("Authorization") != "")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	man := writeManifest(t, "http_fetch_reactor", map[string]any{
		"network": map[string]any{"kind": "allowlist", "hosts": []string{"localhost:" + port}},
	})
	in := fmt.Sprintf(`{"url":"http://localhost:%s/"}`, port)

	code, stdout, stderr := runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-", "--egress-allow-cidr", "127.0.0.0/8")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if env := envelope(t, stdout); env["kind"] != "result" {
		t.Fatalf("envelope %v", env)
	}

	code, stdout, _ = runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-")
	env := envelope(t, stdout)
	if code != 1 || env["code"] != "handler-error" || !strings.Contains(fmt.Sprint(env["details"]), "egress-denied") {
		t.Fatalf("without the allow-range: exit %d %v", code, env)
	}

	code, _, stderr = runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-", "--egress-allow-cidr", "not-a-cidr")
	if code != 2 || !strings.Contains(stderr, "--egress-allow-cidr") {
		t.Fatalf("bad CIDR: exit %d %s", code, stderr)
	}
}

// run: a strict tool's header placeholder is filled from --secrets-file or
// --secrets-env-prefix; the value never reaches stdout or stderr.
func TestRunOperatorSecrets(t *testing.T) {
	seen := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	man := writeManifest(t, "http_fetch_reactor", map[string]any{
		"sandbox":   "strict",
		"limits":    map[string]any{"memMB": 64, "cpuMs": 5000},
		"network":   map[string]any{"kind": "allowlist", "hosts": []string{"127.0.0.1:" + port}},
		"needsSpec": map[string]any{"secrets": map[string]any{"TOKEN": map[string]any{"type": "string"}}},
	})
	in := fmt.Sprintf(`{"url":"http://127.0.0.1:%s/","headers":{"Authorization":"Bearer {{secret:TOKEN}}"}}`, port)

	file := filepath.Join(t.TempDir(), "secrets.json")
	if err := os.WriteFile(file, []byte(`{"TOKEN":"file-s3cret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-", "--secrets-file", file)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if got := <-seen; got != "Bearer file-s3cret" {
		t.Fatalf("server saw %q", got)
	}
	if strings.Contains(stdout+stderr, "s3cret") {
		t.Fatal("the secret leaked to the CLI's output")
	}

	t.Setenv("SBXTEST_TOKEN", "env-s3cret")
	code, stdout, stderr = runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-", "--secrets-env-prefix", "SBXTEST_")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if got := <-seen; got != "Bearer env-s3cret" {
		t.Fatalf("server saw %q", got)
	}

	bad := filepath.Join(t.TempDir(), "bad.env")
	if err := os.WriteFile(bad, []byte("TOKEN=ok\nno-equals-sign-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, in, "run", "--timeout", "10m", "--manifest", man, "--input", "-", "--secrets-file", bad)
	if code != 2 || !strings.Contains(stderr, "line 2") || strings.Contains(stderr, "s3cret") {
		t.Fatalf("bad secrets file: exit %d %s", code, stderr)
	}
}

// --secret-destination binds a secret: sent to its destination, refused
// (exit 1, no value in the output) for another one the allowlist admits.
func TestRunSecretDestination(t *testing.T) {
	seen := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	man := writeManifest(t, "http_fetch_reactor", map[string]any{
		"sandbox":   "strict",
		"limits":    map[string]any{"memMB": 64, "cpuMs": 5000},
		"network":   map[string]any{"kind": "allowlist", "hosts": []string{"127.0.0.1:" + port, "127.0.0.2:" + port}},
		"needsSpec": map[string]any{"secrets": map[string]any{"TOKEN": map[string]any{"type": "string"}}},
	})
	file := filepath.Join(t.TempDir(), "secrets.json")
	if err := os.WriteFile(file, []byte(`{"TOKEN":"file-s3cret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--timeout", "1m", "--manifest", "", "--input", "-", "--secrets-file", file, "--secret-destination", "TOKEN=http://127.0.0.1:" + port}
	args[4] = man
	in := func(host string) string {
		return fmt.Sprintf(`{"url":"http://%s:%s/","headers":{"Authorization":"Bearer {{secret:TOKEN}}"}}`, host, port)
	}
	code, stdout, stderr := runCLI(t, in("127.0.0.1"), args...)
	if code != 0 || <-seen != "Bearer file-s3cret" {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, in("127.0.0.2"), args...)
	if code == 0 || !strings.Contains(stdout, `may not be sent to http://127.0.0.2:`+port) || strings.Contains(stdout+stderr, "s3cret") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, in("127.0.0.1"), append(args[:len(args):len(args)], "--secret-destination", "TOKEN")...)
	if code != 2 || !strings.Contains(stderr, "--secret-destination") {
		t.Fatalf("bad spec: exit %d %s", code, stderr)
	}
}
