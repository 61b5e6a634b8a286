package main

import "testing"

// TestFlagMessages pins the exact words of every flag and command usage
// error (issue 27 §3): one line on stderr naming the fix, nothing on
// stdout, exit 2 — the same shape for every command.
func TestFlagMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "sandboxd run: unknown flag --bogus (see sandboxd help run)\n"},
		{[]string{"run", "-bogus"}, "sandboxd run: unknown flag --bogus (see sandboxd help run)\n"},
		{[]string{"run", "--timout", "5s"}, "sandboxd run: unknown flag --timout; did you mean --timeout? (see sandboxd help run)\n"},
		{[]string{"run", "--manfest", "x"}, "sandboxd run: unknown flag --manfest; did you mean --manifest? (see sandboxd help run)\n"},
		{[]string{"run", "--timeout", "5"}, `sandboxd run: invalid value "5" for --timeout: want a duration such as 500ms, 30s or 2m (see sandboxd help run)` + "\n"},
		{[]string{"run", "--no-cache=maybe"}, `sandboxd run: invalid value "maybe" for --no-cache: want true or false (--no-cache alone means true) (see sandboxd help run)` + "\n"},
		{[]string{"run", "--input"}, "sandboxd run: --input needs a value (see sandboxd help run)\n"},
		{[]string{"serve", "--port", "80"}, "sandboxd serve: unknown flag --port; use --addr HOST:PORT or $PORT (see sandboxd help serve)\n"},
		{[]string{"serve", "--drain-timeout", "8"}, `sandboxd serve: invalid value "8" for --drain-timeout: want a duration such as 500ms, 30s or 2m (see sandboxd help serve)` + "\n"},
		{[]string{"mcp", "--tool", "x"}, "sandboxd mcp: unknown flag --tool; did you mean --tools? (see sandboxd help mcp)\n"},
		{[]string{"conformance", "--cass", "x"}, "sandboxd conformance: unknown flag --cass; did you mean --cases? (see sandboxd help conformance)\n"},
		{[]string{"push", "--bogus"}, "sandboxd push: unknown flag --bogus (see sandboxd help push)\n"},
		{[]string{"inspect", "--tiemout", "3s", "x"}, "sandboxd inspect: unknown flag --tiemout; did you mean --timeout? (see sandboxd help inspect)\n"},
		{[]string{"push-pack", "--bogus"}, "sandboxd push-pack: unknown flag --bogus (see sandboxd help push-pack)\n"},
		{[]string{"runn"}, `sandboxd: unknown command "runn"; did you mean run? (sandboxd help lists the commands)` + "\n"},
		{[]string{"serv"}, `sandboxd: unknown command "serv"; did you mean serve? (sandboxd help lists the commands)` + "\n"},
		{[]string{"frobnicate"}, `sandboxd: unknown command "frobnicate" (sandboxd help lists the commands)` + "\n"},
		{[]string{"help", "runn"}, `sandboxd help: unknown command "runn"; did you mean run? (sandboxd help lists the commands)` + "\n"},
	} {
		code, stdout, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || stdout != "" || stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr\n %q\nwant\n %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"run", "serve", "mcp", "conformance", "push", "pull", "push-pack", "inspect", "version"}
	for in, want := range map[string]string{
		"runn": "run", "rn": "run", "serev": "serve", "conformanc": "conformance", "conf": "conformance",
		"pus": "push", // one edit from push, two from pull
		"xyz": "", "versoin": "version", "push-pak": "push-pack", "": "",
	} {
		if got := nearest(in, names); got != want {
			t.Errorf("nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
