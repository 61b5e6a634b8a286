package suggest

import (
	"slices"
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	long := strings.Repeat("a", MaxLen+40)
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"runn", "run", 1},
		{"versoin", "version", 2}, {"acme.ecko", "acme.echo", 1},
		{"Run", "run", 1}, // bytes: case is Nearest's business
		{long, long[1:], 1}, {long[1:], long, 1}, {long, "", len(long)},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%.20q, %.20q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Distance("acme.ecko", long[:MaxLen]) }); n != 0 {
		t.Errorf("Distance allocates %v times for a %d-byte name", n, MaxLen)
	}
}

// The cases of the three copies this package replaces (cmd/sandboxd's
// commands and flags, manifest's properties and enum values, server's
// tool ids), plus the edges of the rule.
func TestNearest(t *testing.T) {
	commands := []string{"run", "serve", "mcp", "conformance", "push", "pull", "push-pack", "inspect", "version"}
	props := []string{"codeArtifactRef", "description", "id", "input", "limits", "modulePath", "output", "sandbox", "version"}
	sandbox := []string{"none", "context-isolated", "strict"}
	ids := []string{"acme.echo", "acme.lookup", "t.spin"}
	for _, tc := range []struct {
		name       string
		candidates []string
		want       string
	}{
		{"runn", commands, "run"}, {"rn", commands, "run"}, {"serev", commands, "serve"},
		{"conformanc", commands, "conformance"}, {"pus", commands, "push"}, // one edit from push, two from pull
		{"versoin", commands, "version"}, {"push-pak", commands, "push-pack"},
		{"xyz", commands, ""}, {"conf", commands, ""}, // an abbreviation is Completion's
		{"", commands, ""}, {"run", commands, ""}, // nothing to suggest for a valid name
		{"RUNN", commands, "run"}, {"Serve", commands, "serve"}, // case is ignored
		{"limts", props, "limits"}, {"modulePth", props, "modulePath"}, {"descripton", props, "description"},
		{"strictt", sandbox, "strict"}, {"file", []string{"oci", "filesystem"}, ""},
		{"acme.ecko", ids, "acme.echo"}, {"ACME.ECHO", ids, "acme.echo"}, {"acme.nope", ids, ""},
		{"ab", []string{"xy"}, ""},         // 2 edits are more than half of 2 bytes
		{"abcd", []string{"xycd"}, "xycd"}, // 2 edits, half of 4
		{"abcdef", []string{"xyzdef"}, ""}, // 3 edits are too many
		{strings.Repeat("a", MaxLen+1), []string{strings.Repeat("a", MaxLen)}, ""},
		{strings.Repeat("a", MaxLen-1), []string{strings.Repeat("a", MaxLen+1), strings.Repeat("a", MaxLen)}, strings.Repeat("a", MaxLen)},
	} {
		if got := Nearest(tc.name, tc.candidates); got != tc.want {
			t.Errorf("Nearest(%.20q, %.40q) = %q, want %q", tc.name, tc.candidates, got, tc.want)
		}
	}
	// Ties go to the candidate that sorts first, whatever the order given;
	// the caller's slice is left as it was.
	for _, order := range [][]string{{"cat", "bat", "hat"}, {"hat", "cat", "bat"}, {"bat", "hat", "cat"}} {
		before := slices.Clone(order)
		if got := Nearest("xat", order); got != "bat" {
			t.Errorf("Nearest(xat, %q) = %q, want bat", order, got)
		}
		if !slices.Equal(order, before) {
			t.Errorf("Nearest reordered its candidates: %q", order)
		}
	}
	if got := Nearest("xat", []string{"xatt", "bat"}); got != "bat" {
		t.Errorf("Nearest(xat, [xatt bat]) = %q, want bat (both 1 edit; bat sorts first)", got)
	}
}

func TestCompletion(t *testing.T) {
	commands := []string{"run", "serve", "mcp", "conformance", "push", "pull", "push-pack", "inspect", "version"}
	for in, want := range map[string]string{
		"conf": "conformance", "CONF": "conformance", "insp": "inspect", "vers": "version",
		"pus":  "", // push and push-pack
		"co":   "", // too short to be sure
		"push": "", // itself a candidate
		"xyz":  "", "": "",
	} {
		if got := Completion(in, commands); got != want {
			t.Errorf("Completion(%q) = %q, want %q", in, got, want)
		}
	}
}
