package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/registrytest"
)

// TestOCIRunLogsLargeDownload: run says on stderr what it downloads when
// the module is large (size, ref, then done with its time), and prints no
// download line for a cached module or a small one.
func TestOCIRunLogsLargeDownload(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the 3.4 MB go_echo_reactor.wasm")
	}
	reg := registrytest.Start(t)
	host := reg.Host
	dir := filepath.Join("..", "..", "testdata", "wasm")
	big, small := filepath.Join(dir, "go_echo_reactor.wasm"), filepath.Join(dir, "echo_reactor.wasm")
	st, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < runNoteMinSize {
		t.Fatalf("%s (%d bytes) is under the %d-byte note size: pick a larger fixture", big, st.Size(), runNoteMinSize)
	}
	for _, p := range []struct{ file, tag string }{{big, "/runlog/big:1"}, {small, "/runlog/small:1"}} {
		if code, _, stderr := runCLI(t, "", "push", p.file, host+p.tag, "--artifact-version", "1", "--insecure-registry", host, "--artifact-cache-dir", t.TempDir()+"/c"); code != 0 {
			t.Fatalf("push %s: %s", p.file, stderr)
		}
	}
	in := writeInput(t, `{"message":"hi"}`)
	run := func(manifest, cache string) string {
		t.Helper()
		_, stdout, stderr := runCLI(t, "", "run", "--manifest", manifest, "--input", in, "--insecure-registry", host, "--artifact-cache-dir", cache)
		env := envelope(t, stdout)
		if out, _ := json.Marshal(env["output"]); env["kind"] != "result" || string(out) != `{"message":"hi"}` {
			t.Fatalf("run: %v\n%s", env, stderr)
		}
		return stderr
	}
	cache := t.TempDir() + "/c"
	bigRef := host + "/runlog/big:1"
	manifest := ociManifest(t, bigRef, "go_echo_reactor.wasm", "1", nil)
	stderr := run(manifest, cache)
	t.Logf("first run's stderr:\n%s", stderr)
	started := "sandboxd run: downloading " + humanBytes(st.Size()) + " from " + bigRef + " (blob sha256:"
	done := "sandboxd run: downloaded " + humanBytes(st.Size()) + " from " + bigRef + " in "
	if !strings.Contains(stderr, started) || !strings.Contains(stderr, done) || strings.Index(stderr, started) > strings.Index(stderr, done) {
		t.Fatalf("stderr lacks %q then %q:\n%s", started, done, stderr)
	}
	if n := strings.Count(stderr, "sandboxd run: download"); n != 2 {
		t.Errorf("%d download lines for one large module, want 2 (the config and manifest are small)", n)
	}
	if stderr := run(manifest, cache); strings.Contains(stderr, "download") {
		t.Errorf("a cached module printed a download line:\n%s", stderr)
	}
	if stderr := run(ociManifest(t, host+"/runlog/small:1", "echo_reactor.wasm", "1", nil), t.TempDir()+"/c"); strings.Contains(stderr, "download") {
		t.Errorf("a 261-byte module printed a download line:\n%s", stderr)
	}
}
