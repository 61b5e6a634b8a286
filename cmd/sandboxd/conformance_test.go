package main

import (
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func TestConformanceSamplePackExit0(t *testing.T) {
	sandboxtest.SkipShort(t, "examples/echo/handler.wasm", int64(len(examples.EchoWasm)))
	dir := t.TempDir()
	junit, js := filepath.Join(dir, "report.xml"), filepath.Join(dir, "report.json")
	code, stdout, stderr := runCLI(t, "", "conformance", "../../examples/pack", "--junit", junit, "--json", js,
		"--artifact-cache-dir", filepath.Join(dir, "oci"))
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "\x1b[") {
		t.Errorf("colour on a non-terminal: %q", stdout)
	}
	if !strings.Contains(stdout, "PASS  acme.echo ") || !strings.HasPrefix(lastLine(stdout), "PASSED: ") {
		t.Errorf("summary:\n%s", stdout)
	}
	var rep struct {
		Passed bool `json:"passed"`
		Checks []any
	}
	b, err := os.ReadFile(js)
	if err != nil || json.Unmarshal(b, &rep) != nil || !rep.Passed || len(rep.Checks) == 0 {
		t.Errorf("JSON report (%v): %s", err, b)
	}
	x, err := os.ReadFile(junit)
	var suites struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	if err != nil || xml.Unmarshal(x, &suites) != nil || suites.Tests != len(rep.Checks) || suites.Failures != 0 {
		t.Errorf("JUnit report (%v): %+v", err, suites)
	}
}

func TestConformanceBrokenPackExit1(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "", "conformance", "../../conformance/testdata/broken-pack", "--color", "always",
		"--artifact-cache-dir", filepath.Join(dir, "oci"))
	if code != exitError {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "\x1b[31mFAIL\x1b[0m") || !strings.Contains(lastLine(stdout), "20 failed") {
		t.Errorf("summary:\n%s", stdout)
	}
	// --json - replaces the summary with the JSON report on stdout.
	code, stdout, _ = runCLI(t, "", "conformance", "../../conformance/testdata/broken-pack", "--json", "-",
		"--artifact-cache-dir", filepath.Join(dir, "oci"))
	var rep struct{ Passed bool }
	if code != exitError || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Passed {
		t.Errorf("--json -: exit %d, %.200s", code, stdout)
	}
}

func TestConformanceUsageExit2(t *testing.T) {
	for _, args := range [][]string{
		{"conformance"},
		{"conformance", "a", "b"},
		{"conformance", "--nope", "x"},
		{"conformance", "../../examples/pack", "--color", "sometimes"},
		{"conformance", "../../examples/pack", "--case-timeout", "0s"},
		{"conformance", "oci://127.0.0.1:5000/acme/pack:1"}, // no --cases
		{"conformance", "./no-such-pack"},
		{"conformance", "../../examples/pack", "--index", "x.json", "--module-root", "."}, // --index replaces PACK
		{"conformance", "../../examples/pack", "--module-root", "."},                      // --module-root without --index
		{"conformance", "../../examples/pack", "--bundle-map", "m.json"},
		{"conformance", "--index", "x.json", "--module-root", ".", "--envelope", "e.json"}, // no --trusted-keys
		{"conformance", "../../examples/pack", "--trusted-keys", "k.json"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		if code != exitUsage || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestConformanceRegistryUnreachableExit2: an infrastructure problem is
// exit 2 with no verdict, not a failed check.
func TestConformanceRegistryUnreachableExit2(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close() // nothing listens there now
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "", "conformance", "oci://"+host+"/acme/pack@sha256:"+strings.Repeat("ab", 32),
		"--cases", "../../examples/pack", "--insecure-registry", host, "--artifact-cache-dir", filepath.Join(dir, "oci"))
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "cannot reach") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestConformanceOCIPack pushes the sample pack's modules to a real
// registry and checks the artifact against manifests and cases on disk.
func TestConformanceOCIPack(t *testing.T) {
	reg := registrytest.Start(t)
	host := reg.Host
	dir := t.TempDir()
	cache := filepath.Join(dir, "oci")
	code, stdout, stderr := runCLI(t, "", "push", "../../examples/pack/identity.wasm", "../../examples/pack/lookup.wasm",
		host+"/acme/pack:1.0.0", "--artifact-version", "1.0.0", "--insecure-registry", host, "--artifact-cache-dir", cache)
	if code != 0 {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	pinned := strings.TrimSpace(stdout)

	cases := filepath.Join(dir, "cases")
	writePack := func(identityRef string) {
		os.MkdirAll(cases, 0o755)
		for _, name := range []string{"identity", "lookup"} {
			b, err := os.ReadFile("../../examples/pack/" + name + ".tool.json")
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			ref := pinned
			if name == "identity" {
				ref = identityRef
			}
			m["codeArtifactRef"] = map[string]any{"kind": "oci", "imageRef": ref, "modulePath": name + ".wasm", "artifactVersion": "1.0.0"}
			b, _ = json.Marshal(m)
			if err := os.WriteFile(filepath.Join(cases, name+".tool.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := os.ReadFile("../../examples/pack/cases/" + name + ".cases.json")
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(cases, name+".cases.json"), c, 0o644)
		}
	}
	writePack(pinned)
	code, stdout, stderr = runCLI(t, "", "conformance", "oci://"+pinned, "--cases", cases,
		"--insecure-registry", host, "--artifact-cache-dir", cache)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "PASS  acme.identity  artifact") {
		t.Errorf("summary:\n%s", stdout)
	}

	// A manifest pinned to another digest does not describe this artifact.
	other := host + "/acme/pack@sha256:" + strings.Repeat("0", 64)
	writePack(other)
	code, stdout, _ = runCLI(t, "", "conformance", "oci://"+pinned, "--cases", cases,
		"--insecure-registry", host, "--artifact-cache-dir", cache)
	if code != exitError || !strings.Contains(stdout, "artifact-integrity-failed: imageRef pins sha256:000000000000, but the pack is") {
		t.Errorf("exit %d\n%s", code, stdout)
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestConformanceIndexPack checks the inputs serve takes — a pack index, a
// module root and a bundle map — with guardrail checks among its entries.
func TestConformanceIndexPack(t *testing.T) {
	dir := t.TempDir()
	src := "../../conformance/testdata/index-pack"
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, rel), b, 0o644)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../pack/testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.SkipShort(t, "pack/testdata/checks_reactor.wasm", int64(len(mod)))
	_ = os.MkdirAll(filepath.Join(dir, "dist", "guardrails"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "dist", "guardrails", "checks.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "", "conformance", "--index", filepath.Join(dir, "index.json"),
		"--module-root", filepath.Join(dir, "dist"), "--bundle-map", filepath.Join(dir, "dist", "bundle-map.json"))
	// The fixture's acme.no-verdict answers without "passed": its one failure.
	if code != exitError || !strings.Contains(stdout, "PASS  acme.checks.min-length  case a long enough output passes") ||
		!strings.HasPrefix(lastLine(stdout), "FAILED: 40 checks, 37 passed, 1 failed") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Without the bundle map the source paths resolve to nothing.
	code, stdout, _ = runCLI(t, "", "conformance", "--index", filepath.Join(dir, "index.json"), "--module-root", filepath.Join(dir, "dist"))
	if code != exitError || !strings.Contains(stdout, "artifact-unavailable") {
		t.Fatalf("without --bundle-map: exit %d\n%s", code, stdout)
	}
}
