package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// TestOCIUXCommands: push refuses unsafe titles; tag, copy, pull -o,
// login and logout against docker-registry (htpasswd).
func TestOCIUXCommands(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Options{Htpasswd: registrytest.WriteHtpasswd(t)})
	host := reg.Host
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	fixture := filepath.Join("..", "..", "testdata", "wasm", "echo_reactor.wasm")
	flags := []string{"--insecure-registry", host, "--artifact-cache-dir", t.TempDir() + "/c"}
	cli := func(stdin string, args ...string) (int, string, string) {
		return runCLI(t, stdin, append(args, flags...)...)
	}
	for _, spec := range []string{fixture + "=../evil.wasm", fixture + "=/etc/abs.wasm"} {
		if code, _, stderr := cli("", "push", spec, host+"/ux/x:1", "--artifact-version", "1"); code != 2 {
			t.Fatalf("push %s: exit %d (%s)", spec, code, stderr)
		}
	}
	if code, _, stderr := cli("", "push", fixture, host+"/ux/x:1", "--artifact-version", "1"); code != 1 || !strings.Contains(stderr, "none were found") {
		t.Fatalf("push without credentials: exit %d: %s", code, stderr)
	}
	if code, _, stderr := cli("wrong\n", "login", host, "-u", registrytest.HtpasswdUser, "--password-stdin"); code != 1 || !strings.Contains(stderr, "rejected") {
		t.Fatalf("login, wrong password: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := cli(registrytest.HtpasswdPassword+"\n", "login", host, "-u", registrytest.HtpasswdUser, "--password-stdin"); code != 0 || !strings.Contains(stdout, filepath.Join(cfgDir, "config.json")) {
		t.Fatalf("login: exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, stderr := cli("", "push", fixture+"=handlers/echo.wasm", host+"/ux/x:1", "--artifact-version", "1")
	if code != 0 {
		t.Fatalf("push after login: %s", stderr)
	}
	pinned := strings.TrimSpace(stdout)
	if code, stdout, stderr := cli("", "tag", host+"/ux/x:1", "stable", "v1"); code != 0 || strings.TrimSpace(stdout) != pinned {
		t.Fatalf("tag: exit %d %q %s", code, stdout, stderr)
	}
	code, stdout, stderr = cli("", "copy", host+"/ux/x:stable", host+"/ux/y:1")
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(stdout), host+"/ux/y@sha256:") {
		t.Fatalf("copy: exit %d %q %s", code, stdout, stderr)
	}
	out := t.TempDir()
	if code, _, stderr := cli("", "pull", host+"/ux/y:1", "-o", out); code != 0 {
		t.Fatalf("pull -o: %s", stderr)
	}
	if code, stdout, _ := cli("", "pull", host+"/ux/y:1", "--json"); code != 0 || !strings.Contains(stdout, `"layout": "wasm"`) {
		t.Fatalf("pull --json: %d %s", code, stdout)
	}
	want, _ := os.ReadFile(fixture)
	if b, err := os.ReadFile(filepath.Join(out, "handlers", "echo.wasm")); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("pull -o wrote: %v", err)
	}
	code, stdout, stderr = cli("", "push", fixture, host+"/ux/m:a,b", "--artifact-version", "3", "--annotation", "org.example.team=wasm")
	if code != 0 {
		t.Fatalf("push to two tags: %s", stderr)
	}
	two := strings.TrimSpace(stdout)
	// The --annotation value is in the manifest, as other clients read it.
	t.Run("annotation read back by crane and oras", func(t *testing.T) {
		for _, c := range [][]string{
			{ociClient(t, "crane"), "manifest", "--insecure", two},
			{ociClient(t, "oras"), "manifest", "fetch", "--plain-http", two},
		} {
			out, err := exec.Command(c[0], c[1:]...).Output()
			if err != nil {
				t.Fatalf("%s %v: %v", filepath.Base(c[0]), c[1:], err)
			}
			var m struct {
				Annotations map[string]string `json:"annotations"`
			}
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("%s: %v\n%s", filepath.Base(c[0]), err, out)
			}
			if m.Annotations["org.example.team"] != "wasm" || m.Annotations["org.opencontainers.image.version"] != "3" {
				t.Fatalf("%s reads the annotations %v, want org.example.team=wasm and the version 3", filepath.Base(c[0]), m.Annotations)
			}
		}
	})
	for _, tag := range []string{"a", "b"} {
		code, stdout, stderr := cli("", "inspect", "--json", host+"/ux/m:"+tag)
		if code != 0 || !strings.Contains(stdout, two) {
			t.Fatalf("inspect %s: %s %s", tag, stdout, stderr)
		}
	}
	if code, stdout, _ := cli("", "tags", host+"/ux/x"); code != 0 || strings.Join(strings.Fields(stdout), " ") != "1 stable v1" {
		t.Fatalf("tags: %d %q", code, stdout)
	}
	code, stdout, _ = cli("", "cache", "size")
	if code != 0 || !strings.Contains(stdout, "blobs") {
		t.Fatalf("cache size: %d %s", code, stdout)
	}
	if code, stdout, _ := cli("", "cache", "prune", "--max-size-mb", "0"); code != 0 || !strings.Contains(stdout, "removed") {
		t.Fatalf("cache prune: %d %s", code, stdout)
	}
	if code, stdout, _ := cli("", "cache", "list", "--json"); code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Fatalf("cache list after pruning everything: %d %q", code, stdout)
	}
	if code, stdout, _ := cli("", "logout", host); code != 0 || !strings.Contains(stdout, "Removed") {
		t.Fatalf("logout: %d %s", code, stdout)
	}
	if code, _, _ := cli("", "pull", host+"/ux/y:1"); code != 1 {
		t.Fatalf("pull after logout: exit %d", code)
	}
}
