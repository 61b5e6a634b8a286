// Command testsummary runs go test -json with the given arguments and prints
// what go test prints without -v (each package's ok/FAIL line, the output of
// failing tests), then every skipped test grouped by its reason, and a
// closing line "tests: N passed, N failed, N skipped". A plain `ok` hides
// tests that skipped because a tool (wat2wasm, xmllint, docker-registry) is
// missing; this says so. It exits 1 when a test or a package failed, or go
// test did.
//
//	go run ./mk/testsummary -race -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or a package's pass/fail
}

type key struct{ pkg, test string }

type summary struct {
	passed, failed, skipped int
	pkgFailed               bool
	output                  map[key][]string // a running test's output lines
	skips                   map[string][]string
	pkgTime                 map[string]float64 // each package's test run, seconds
	w                       io.Writer
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	s := newSummary(os.Stdout)
	s.read(out)
	runErr := cmd.Wait()
	s.close()
	if runErr != nil || s.failed > 0 || s.pkgFailed {
		os.Exit(1)
	}
}

func newSummary(w io.Writer) *summary {
	return &summary{output: map[key][]string{}, skips: map[string][]string{}, pkgTime: map[string]float64{}, w: w}
}

func (s *summary) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			fmt.Fprintln(s.w, sc.Text()) // build errors and the like
			continue
		}
		s.add(ev)
	}
}

func (s *summary) add(ev event) {
	k := key{ev.Package, ev.Test}
	switch ev.Action {
	case "build-output": // go test -json reports compile errors so (Go 1.24+)
		fmt.Fprint(s.w, ev.Output)
		return
	case "build-fail":
		s.pkgFailed = true
		return
	}
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			// The package's own lines: ok/FAIL/? and build failures; test
			// progress lines (=== RUN, --- PASS) are dropped as without -v.
			if l := ev.Output; !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- ") &&
				!strings.HasPrefix(l, "PASS\n") && !strings.HasPrefix(l, "testing: warning") {
				fmt.Fprint(s.w, l)
			}
		case "fail":
			s.pkgFailed = true
			s.pkgTime[shortPkg(ev.Package)] = ev.Elapsed
		case "pass":
			s.pkgTime[shortPkg(ev.Package)] = ev.Elapsed
		}
		return
	}
	switch ev.Action {
	case "run":
		s.output[k] = nil
	case "output":
		if !strings.HasPrefix(ev.Output, "=== ") {
			s.output[k] = append(s.output[k], ev.Output)
		}
	case "pass":
		s.passed++
		delete(s.output, k)
	case "fail":
		s.failed++
		for _, l := range s.output[k] {
			fmt.Fprint(s.w, l)
		}
		delete(s.output, k)
	case "skip":
		s.skipped++
		s.skips[skipReason(s.output[k])] = append(s.skips[skipReason(s.output[k])], shortPkg(ev.Package)+"."+ev.Test)
		delete(s.output, k)
	}
}

// skipReason is the message t.Skip printed ("file_test.go:12: wat2wasm is
// not installed …"), without the file:line prefix. It is the last such line
// before "--- SKIP": a test may t.Log before it skips (TestServeEnvelope
// logs each refused boot, then skips where it needs the built binary), and
// those lines are not the reason. A multi-line message's further lines
// carry no prefix, so its first line is the one taken.
func skipReason(lines []string) string {
	reason := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if msg, ok := logMessage(l); ok {
			reason = msg
		} else if reason == "" {
			reason = l
		}
	}
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

// logMessage is l without its "file.go:12: " prefix; ok is false when l
// has none (a continuation line of a multi-line message).
func logMessage(l string) (string, bool) {
	file, rest, ok := strings.Cut(l, ".go:")
	if !ok || strings.ContainsAny(file, " \t") {
		return "", false
	}
	line, msg, ok := strings.Cut(rest, ": ")
	if !ok || line == "" || strings.Trim(line, "0123456789") != "" {
		return "", false
	}
	return msg, true
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/sandboxd/sandboxd/") }

func (s *summary) close() {
	if s.skipped > 0 {
		reasons := make([]string, 0, len(s.skips))
		for r := range s.skips {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			if len(s.skips[reasons[i]]) != len(s.skips[reasons[j]]) {
				return len(s.skips[reasons[i]]) > len(s.skips[reasons[j]])
			}
			return reasons[i] < reasons[j]
		})
		fmt.Fprintf(s.w, "\nskipped tests, by reason:\n")
		for _, r := range reasons {
			tests := s.skips[r]
			shown := tests
			if len(shown) > 3 {
				shown = shown[:3]
			}
			more := ""
			if len(tests) > len(shown) {
				more = fmt.Sprintf(", … %d more", len(tests)-len(shown))
			}
			fmt.Fprintf(s.w, "  %3d  %s  (%s%s)\n", len(tests), r, strings.Join(shown, ", "), more)
		}
	}
	if slow := s.slowest(5); slow != "" {
		fmt.Fprintf(s.w, "\nslowest packages: %s\n", slow)
	}
	fmt.Fprintf(s.w, "\ntests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}

// slowest names the n packages whose tests ran longest ("server 12.3s,
// executor 9.8s"): where a faster local loop has to start.
func (s *summary) slowest(n int) string {
	pkgs := make([]string, 0, len(s.pkgTime))
	for p := range s.pkgTime {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool {
		if s.pkgTime[pkgs[i]] != s.pkgTime[pkgs[j]] {
			return s.pkgTime[pkgs[i]] > s.pkgTime[pkgs[j]]
		}
		return pkgs[i] < pkgs[j]
	})
	var parts []string
	for _, p := range pkgs[:min(n, len(pkgs))] {
		parts = append(parts, fmt.Sprintf("%s %.1fs", p, s.pkgTime[p]))
	}
	return strings.Join(parts, ", ")
}
