package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Status is the outcome of one check.
type Status string

// The outcomes of a check. Only StatusFail makes a Report fail.
const (
	StatusPass Status = "pass"
	StatusFail Status = "fail"
	StatusWarn Status = "warn"
	StatusSkip Status = "skip"
)

// Check is one finding: a named check of one tool and its outcome.
type Check struct {
	// Tool is the tool id, or the manifest's file name (relative to the pack)
	// when the manifest has no readable id.
	Tool string `json:"tool"`
	// Name is the check name (see the package documentation).
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Code is the native error code behind a failure or warning, when one applies.
	Code string `json:"code,omitempty"`
	// Reason says what was checked (pass) or what is wrong (fail, warn, skip).
	Reason string `json:"reason"`
}

// Report is the outcome of a conformance run. Checks are grouped by tool,
// tools in the order of their ids, checks in the documented order.
type Report struct {
	// Source is the pack as given to Run.
	Source string `json:"source"`
	// Deterministic reports whether guests ran with fixed clocks and a seeded
	// random source, and Seed is that seed.
	Deterministic bool    `json:"deterministic"`
	Seed          uint64  `json:"seed,omitempty"`
	Checks        []Check `json:"checks"`
}

// Totals counts checks by status.
type Totals struct {
	Checks   int `json:"checks"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Warnings int `json:"warnings"`
	Skipped  int `json:"skipped"`
}

// Totals counts the report's checks by status.
func (r *Report) Totals() Totals {
	t := Totals{Checks: len(r.Checks)}
	for _, c := range r.Checks {
		switch c.Status {
		case StatusPass:
			t.Passed++
		case StatusFail:
			t.Failed++
		case StatusWarn:
			t.Warnings++
		case StatusSkip:
			t.Skipped++
		}
	}
	return t
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool { return r.Totals().Failed > 0 }

func (r *Report) add(tool, name string, st Status, code, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Tool: tool, Name: name, Status: st, Code: code, Reason: fmt.Sprintf(format, args...)})
}

// ANSI colours of the summary's status column.
const (
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiDim    = "\x1b[2m"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
)

// WriteSummary writes the human summary: one line per check
//
//	STATUS  TOOL  CHECK  [code: ]reason
//
// with the columns aligned, then one totals line. color adds ANSI colours
// to the status column (meant for a terminal). The text is otherwise the
// same with and without colour.
func (r *Report) WriteSummary(w io.Writer, color bool) error {
	toolW, nameW := 4, 5
	for _, c := range r.Checks {
		toolW = max(toolW, len(c.Tool))
		nameW = max(nameW, len(c.Name))
	}
	var b strings.Builder
	for _, c := range r.Checks {
		label, col := "PASS", ansiGreen
		switch c.Status {
		case StatusFail:
			label, col = "FAIL", ansiRed
		case StatusWarn:
			label, col = "WARN", ansiYellow
		case StatusSkip:
			label, col = "SKIP", ansiDim
		}
		if color {
			label = col + label + ansiReset
		}
		reason := oneLine(c.Reason)
		if c.Code != "" {
			reason = c.Code + ": " + reason
		}
		fmt.Fprintf(&b, "%s  %-*s  %-*s  %s\n", label, toolW, c.Tool, nameW, c.Name, reason)
	}
	t := r.Totals()
	verdict := "PASSED"
	if t.Failed > 0 {
		verdict = "FAILED"
	}
	if color {
		col := ansiGreen
		if t.Failed > 0 {
			col = ansiRed
		}
		verdict = ansiBold + col + verdict + ansiReset
	}
	fmt.Fprintf(&b, "%s: %d checks, %d passed, %d failed, %d warnings, %d skipped\n",
		verdict, t.Checks, t.Passed, t.Failed, t.Warnings, t.Skipped)
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine folds a reason onto one line for the summary.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r\n", " ")
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// jsonReport is the JSON report's shape.
type jsonReport struct {
	Version int `json:"version"`
	*Report
	Totals Totals `json:"totals"`
	Passed bool   `json:"passed"`
}

// WriteJSON writes the JSON report: {"version":1, "source", "deterministic",
// "seed"?, "checks":[{tool,name,status,code?,reason}], "totals":{checks,
// passed,failed,warnings,skipped}, "passed"}, indented, with a trailing
// newline.
func (r *Report) WriteJSON(w io.Writer) error {
	rep := *r
	if rep.Checks == nil {
		rep.Checks = []Check{}
	}
	b, err := json.MarshalIndent(jsonReport{Version: 1, Report: &rep, Totals: r.Totals(), Passed: !r.Failed()}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// JUnit XML shapes (the Ant/Jenkins schema; testdata/junit.xsd).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML in the shape GitLab, GitHub
// (test-reporter actions) and Jenkins render: one <testsuite> per tool, one
// <testcase> per check (classname "conformance.<tool>"), <failure> with the
// error code as type for a failed check, <skipped> for a skipped one, and a
// warning as a passing case with the warning in <system-out>.
func (r *Report) WriteJUnit(w io.Writer) error {
	doc := junitSuites{Name: "sandboxd conformance"}
	idx := map[string]int{}
	for _, c := range r.Checks {
		i, ok := idx[c.Tool]
		if !ok {
			i = len(doc.Suites)
			idx[c.Tool] = i
			doc.Suites = append(doc.Suites, junitSuite{Name: c.Tool})
		}
		s := &doc.Suites[i]
		jc := junitCase{Name: c.Name, ClassName: "conformance." + c.Tool}
		msg := c.Reason
		if c.Code != "" {
			msg = c.Code + ": " + c.Reason
		}
		switch c.Status {
		case StatusFail:
			jc.Failure = &junitFailure{Message: oneLine(msg), Type: failureType(c.Code), Text: msg}
			s.Failures++
			doc.Failures++
		case StatusSkip:
			jc.Skipped = &junitMessage{Message: oneLine(msg)}
			s.Skipped++
		case StatusWarn:
			jc.SystemOut = "warning: " + msg
		default:
			jc.SystemOut = msg
		}
		s.Tests++
		doc.Tests++
		s.Cases = append(s.Cases, jc)
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", xml.Header, b)
	return err
}

func failureType(code string) string {
	if code == "" {
		return "conformance"
	}
	return code
}
