package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/toolerr"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	samplePack = "../examples/pack"
	brokenPack = "testdata/broken-pack"
)

func ociClient(t *testing.T) *artifact.OCI {
	t.Helper()
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(filepath.Join(t.TempDir(), "oci")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func run(t *testing.T, source string, opts Options) *Report {
	t.Helper()
	skipShortGoGuest(t, source, opts.ModuleRoot)
	if opts.OCI == nil {
		opts.OCI = ociClient(t)
	}
	rep, err := Run(context.Background(), source, opts)
	if err != nil {
		t.Fatalf("Run(%s): %v", source, err)
	}
	return rep
}

var modulePathRE = regexp.MustCompile(`"modulePath"\s*:\s*"([^"]+)"`)

// skipShortGoGuest skips t under -short (sandboxtest.SkipShort) when the
// pack in source (a directory of tool manifests) or under moduleRoot (an
// index pack's modules) runs a guest over sandboxtest.BigGuest, such as the sample pack's standard-Go echo handler or
// the index pack's checks_reactor: each run compiles it for seconds, so
// these tests run only in the full (CI) run.
func skipShortGoGuest(t *testing.T, source, moduleRoot string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	var big []string
	var most int64
	check := func(p string) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Size() > sandboxtest.BigGuest && !slices.Contains(big, filepath.Base(p)) {
			big = append(big, filepath.Base(p))
			most = max(most, fi.Size())
		}
	}
	if moduleRoot != "" {
		_ = filepath.WalkDir(moduleRoot, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".wasm") {
				check(p)
			}
			return nil
		})
	}
	if fi, err := os.Stat(source); err == nil && fi.IsDir() {
		files, _ := filepath.Glob(filepath.Join(source, "*"))
		for _, f := range files {
			switch {
			case strings.HasSuffix(f, ".wasm"):
				check(f)
			case strings.HasSuffix(f, ".json"):
				b, _ := os.ReadFile(f)
				for _, m := range modulePathRE.FindAllSubmatch(b, -1) {
					check(filepath.Join(source, string(m[1])))
				}
			}
		}
	}
	sandboxtest.SkipShort(t, strings.Join(big, ", "), most)
}

// wallClock masks the clock tool's readings, the one part of the broken
// pack's report that differs between runs.
// (nanoseconds since 1970: 19 digits), in every report format.
var wallClock = regexp.MustCompile(`\b1[0-9]{18}\b`)

func normalize(b []byte) []byte { return wallClock.ReplaceAll(b, []byte(`<ns>`)) }

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the report (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func summary(t *testing.T, rep *Report, color bool) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteSummary(&b, color); err != nil {
		t.Fatal(err)
	}
	return normalize(b.Bytes())
}

func TestSamplePackPasses(t *testing.T) {
	rep := run(t, samplePack, Options{})
	if rep.Failed() {
		t.Errorf("the sample pack fails:\n%s", summary(t, rep, false))
	}
	if tot := rep.Totals(); tot.Warnings != 0 || tot.Passed < 35 {
		t.Errorf("totals %+v", tot)
	}
	golden(t, "sample-pack.summary.golden", summary(t, rep, false))
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "sample-pack.json.golden", js.Bytes())
}

// TestBrokenPackFails asserts the exact report of the broken pack, and
// separately that every failure kind appears exactly once, on the tool
// built to show it, with its code.
func TestBrokenPackFails(t *testing.T) {
	rep := run(t, brokenPack, Options{})
	golden(t, "broken-pack.summary.golden", summary(t, rep, false))
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "broken-pack.json.golden", normalize(js.Bytes()))

	want := []string{
		"bad-manifest.tool.json manifest invalid-tool-definition",
		"broken.bad-schema schemas invalid-tool-definition",
		"broken.strict-unrestricted network policy-refused",
		"broken.bad-allowlist network invalid-tool-definition",
		"broken.strict-no-limits limits policy-refused",
		"broken.filesystem-ref artifact-ref artifact-refused",
		"broken.unpinned-strict artifact-ref artifact-refused",
		"broken.missing-module artifact artifact-unavailable",
		"broken.wrong-version artifact artifact-integrity-failed",
		"broken.not-compiling module handler-shape-invalid",
		"broken.forbidden-import abi handler-shape-invalid",
		"broken.strict-secret abi handler-shape-invalid",
		"broken.identity case wrong expected output ",
		"broken.identity case expects an error it never gets ",
		"broken.identity case output does not match the case schema ",
		"broken.identity case expects the wrong error code input-validation-failed",
		"broken.bad-output probe output-schema output-validation-failed",
		"malformed.cases.json cases malformed-message",
		"orphan.cases.json cases tool-not-in-pack",
		"broken.identity (x-duplicate-id.tool.json) manifest invalid-tool-definition",
	}
	var got, warns []string
	for _, c := range rep.Checks {
		switch c.Status {
		case StatusFail:
			got = append(got, c.Tool+" "+c.Name+" "+c.Code)
			if c.Reason == "" {
				t.Errorf("%s %s fails without a reason", c.Tool, c.Name)
			}
		case StatusWarn:
			warns = append(warns, c.Tool+" "+c.Name)
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// broken.bad-schema and broken.clock take a non-object input: MCP
	// cannot serve them.
	sort.Strings(warns)
	if strings.Join(warns, ", ") != "broken.bad-schema mcp, broken.clock mcp, broken.clock probe determinism" {
		t.Errorf("warnings %v, want the clock tool's determinism and two mcp", warns)
	}
	if !rep.Failed() {
		t.Error("the broken pack passes")
	}
}

// TestDeterministicModeFixesTheClock runs the clock tool of the broken
// pack with --deterministic: its answer no longer varies.
func TestDeterministicModeFixesTheClock(t *testing.T) {
	rep := run(t, brokenPack, Options{Deterministic: true, Seed: 7})
	found := false
	for _, c := range rep.Checks {
		if c.Tool == "broken.clock" && c.Name == "probe determinism" {
			found = true
			if c.Status != StatusPass {
				t.Errorf("determinism under --deterministic: %s %s", c.Status, c.Reason)
			}
		}
		if c.Status == StatusWarn && c.Name != "mcp" {
			t.Errorf("warning under --deterministic: %+v", c)
		}
	}
	if !found || !rep.Deterministic || rep.Seed != 7 {
		t.Errorf("found %v, deterministic %v seed %d", found, rep.Deterministic, rep.Seed)
	}
}

// TestJUnitValidatesAgainstXSD checks both reports' JUnit XML against the
// Jenkins/Ant JUnit schema with xmllint (libxml2-utils).
func TestJUnitValidatesAgainstXSD(t *testing.T) {
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("xmllint is not installed (apt-get install libxml2-utils); CI=true requires it")
		}
		t.Skip("xmllint is not installed (apt-get install libxml2-utils)")
	}
	for _, pack := range []string{samplePack, brokenPack} {
		rep := run(t, pack, Options{})
		var b bytes.Buffer
		if err := rep.WriteJUnit(&b); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "report.xml")
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(xmllint, "--noout", "--schema", filepath.Join("testdata", "junit.xsd"), f).CombinedOutput()
		if err != nil {
			t.Errorf("%s: JUnit XML does not validate: %v\n%s\n%s", pack, err, out, b.String())
		}
		if pack == brokenPack {
			golden(t, "broken-pack.junit.golden", normalize(b.Bytes()))
		}
	}
	// The schema is not vacuous: a testcase without its required name fails.
	bad := filepath.Join(t.TempDir(), "bad.xml")
	os.WriteFile(bad, []byte(`<testsuites><testsuite name="x" tests="1"><testcase classname="c"/></testsuite></testsuites>`), 0o644)
	if err := exec.Command(xmllint, "--noout", "--schema", filepath.Join("testdata", "junit.xsd"), bad).Run(); err == nil {
		t.Error("the XSD accepts a testcase without a name")
	}
}

// TestUnreachableRegistryIsInfra: a tool whose registry cannot be reached
// stops the run with an *InfraError (exit 2), not a failed check.
func TestUnreachableRegistryIsInfra(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(brokenPack, "identity.tool.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	m["codeArtifactRef"] = map[string]any{"kind": "oci", "imageRef": host + "/acme/pack@sha256:" + strings.Repeat("ab", 32), "modulePath": "identity.wasm", "artifactVersion": "1"}
	b, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "identity.tool.json"), b, 0o644)
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(filepath.Join(t.TempDir(), "oci")).WithInsecureRegistries(host))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	rep, err := Run(context.Background(), dir, Options{OCI: o})
	var ie *InfraError
	if rep != nil || !asInfra(err, &ie) || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("Run = %v, %v; want an *InfraError", rep, err)
	}
}

func TestColorOnlyWhenAsked(t *testing.T) {
	rep := &Report{}
	rep.add("t", "manifest", StatusPass, "", "ok")
	rep.add("t", "abi", StatusFail, "handler-shape-invalid", "line one\nline two")
	plain, colored := summary(t, rep, false), summary(t, rep, true)
	if bytes.Contains(plain, []byte("\x1b[")) {
		t.Errorf("plain summary has escapes: %q", plain)
	}
	if !bytes.Contains(colored, []byte("\x1b[31mFAIL\x1b[0m")) {
		t.Errorf("coloured summary: %q", colored)
	}
	want := "PASS  t     manifest  ok\nFAIL  t     abi       handler-shape-invalid: line one line two\nFAILED: 2 checks, 1 passed, 1 failed, 0 warnings, 0 skipped\n"
	if string(plain) != want {
		t.Errorf("summary:\n%q\nwant\n%q", plain, want)
	}
}

func TestInfraErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		source string
		opts   Options
	}{
		"missing dir":        {"testdata/nope", Options{}},
		"a file":             {"conformance_test.go", Options{}},
		"no manifests":       {"testdata/broken-pack/wat", Options{}},
		"oci without cases":  {"oci://127.0.0.1:1/acme/pack:1", Options{}},
		"oci without client": {"oci://127.0.0.1:1/acme/pack:1", Options{Cases: "testdata"}},
	} {
		t.Run(name, func(t *testing.T) {
			opts := tc.opts
			if name != "oci without client" {
				opts.OCI = ociClient(t)
			}
			rep, err := Run(context.Background(), tc.source, opts)
			var ie *InfraError
			if rep != nil || err == nil || !asInfra(err, &ie) {
				t.Fatalf("Run = %v, %v; want an *InfraError", rep, err)
			}
		})
	}
}

func asInfra(err error, target **InfraError) bool {
	e, ok := err.(*InfraError)
	*target = e
	return ok
}

func TestParseCaseFileRefusesBadFiles(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":         `{`,
		"trailing data":    `{"tool":"a","cases":[]} {}`,
		"no tool":          `{"cases":[]}`,
		"unknown field":    `{"tool":"a","cases":[],"x":1}`,
		"no name":          `{"tool":"a","cases":[{"input":1,"expect":{"output":1}}]}`,
		"duplicate name":   `{"tool":"a","cases":[{"name":"x","input":1,"expect":{"output":1}},{"name":"x","input":1,"expect":{"output":1}}]}`,
		"no input":         `{"tool":"a","cases":[{"name":"x","expect":{"output":1}}]}`,
		"two expectations": `{"tool":"a","cases":[{"name":"x","input":1,"expect":{"output":1,"error":{"code":"handler-error"}}}]}`,
		"no expectation":   `{"tool":"a","cases":[{"name":"x","input":1,"expect":{}}]}`,
		"unknown code":     `{"tool":"a","cases":[{"name":"x","input":1,"expect":{"error":{"code":"oops"}}}]}`,
		"bad schema":       `{"tool":"a","cases":[{"name":"x","input":1,"expect":{"outputSchema":{"type":"nope"}}}]}`,
		"negative timeout": `{"tool":"a","cases":[{"name":"x","input":1,"timeoutMs":-1,"expect":{"output":1}}]}`,
		"huge timeout":     `{"tool":"a","cases":[{"name":"x","input":1,"timeoutMs":999999999999,"expect":{"output":1}}]}`,
		"oversized":        `{"tool":"` + strings.Repeat("a", MaxCaseFileSize) + `","cases":[]}`,
	} {
		if _, err := ParseCaseFile([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cf, err := ParseCaseFile([]byte(`{"tool":"a","cases":[{"name":"x","input":{"a":1},"expect":{"outputSchema":{"type":"object"}}}]}`))
	if err != nil || len(cf.Cases) != 1 || cf.Cases[0].Expect.schema == nil {
		t.Fatalf("valid file: %v, %+v", err, cf)
	}
}

func TestSameJSON(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2.0],"a":1e0}`, true},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":null}`, `{}`, false},
		{`12345678901234567890`, `12345678901234567891`, false},
		{`not json`, `not json`, false},
	} {
		if got := sameJSON([]byte(tc.a), []byte(tc.b)); got != tc.same {
			t.Errorf("sameJSON(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

func TestJSONReportShape(t *testing.T) {
	rep := &Report{Source: "x"}
	rep.add("t", "abi", StatusWarn, "", "w")
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["version"] != 1.0 || doc["passed"] != true || doc["totals"].(map[string]any)["warnings"] != 1.0 {
		t.Errorf("JSON report %s", b.String())
	}
}

// TestFuelBudget: with --fuel-budget, a case that needs more work than the
// budget fails with limits-exceeded naming the fuel budget, on every run.
func TestFuelBudget(t *testing.T) {
	rep := run(t, samplePack, Options{Deterministic: true, FuelBudget: 1000})
	failed := 0
	for _, c := range rep.Checks {
		if c.Status == StatusFail {
			failed++
			if c.Code != "limits-exceeded" || !strings.Contains(c.Reason, "fuel budget of 1000") {
				t.Errorf("failure %+v", c)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no case ran out of a 1000-unit fuel budget")
	}
	if rep := run(t, samplePack, Options{Deterministic: true, FuelBudget: 1 << 40}); rep.Failed() {
		t.Errorf("a generous fuel budget failed the sample pack")
	}
}

// TestModuleCheckRefusesWhatCrashesWazero: a module that makes wazero
// v1.12's validator panic (function 0 calls function 1, whose type index
// does not exist) and a compile bomb (F16's loop-phi shape, 56 s to
// compile at 1.1 MB) fail the module check with handler-shape-invalid, at
// once: conformance compiles a module through the executor's guard.
func TestModuleCheckRefusesWhatCrashesWazero(t *testing.T) {
	const hdr = "\x00asm\x01\x00\x00\x00"
	calleeType := []byte(hdr + "\x01\x07\x02\x60\x00\x00\x60\x00\x00" + "\x03\x03\x02\x00\x49" +
		"\x0a\x09\x02\x04\x00\x10\x01\x0b\x02\x00\x0b")
	// 40,000 i32 locals live around one loop (over the budget's carried values).
	var body []byte
	body = append(binary.AppendUvarint([]byte{1}, 40000), 0x7f, 0x03, 0x40)
	for i := 0; i < 40000; i++ {
		body = binary.AppendUvarint(append(body, 0x20), uint64((i+1)%40000))
		body = binary.AppendUvarint(append(body, 0x21), uint64(i))
	}
	body = append(body, 0x41, 0x00, 0x0d, 0x00, 0x0b, 0x0b)
	code := append(binary.AppendUvarint([]byte{1}, uint64(len(body))), body...)
	bomb := append([]byte(hdr+"\x01\x04\x01\x60\x00\x00"+"\x03\x02\x01\x00"+"\x0a"), binary.AppendUvarint(nil, uint64(len(code)))...)
	bomb = append(bomb, code...)
	for name, bin := range map[string][]byte{"callee-type": calleeType, "loop-bomb": bomb} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := os.ReadFile(filepath.Join(brokenPack, "not-compiling.tool.json"))
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(m, &doc); err != nil {
				t.Fatal(err)
			}
			doc["id"] = "crash." + name
			doc["codeArtifactRef"] = map[string]any{"kind": "filesystem", "modulePath": "m.wasm"}
			m, _ = json.Marshal(doc)
			if err := os.WriteFile(filepath.Join(dir, "m.tool.json"), m, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "m.wasm"), bin, 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			rep := run(t, dir, Options{AllowUnmetered: true})
			el := time.Since(start)
			var module *Check
			for i := range rep.Checks {
				if rep.Checks[i].Name == "module" {
					module = &rep.Checks[i]
				}
			}
			if module == nil || module.Status != StatusFail || module.Code != string(toolerr.HandlerShapeInvalid) {
				t.Fatalf("module check %+v, want a handler-shape-invalid failure", module)
			}
			if el > 10*time.Second {
				t.Errorf("the check took %v", el)
			}
			t.Logf("%s: %s (%v)", name, module.Reason, el)
		})
	}
}
