package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// parseFlags runs parse (fs.Parse, or parseInterspersed for commands that
// take flags between positional arguments) with fs's usage and output
// silenced, so a bad flag costs one line on stderr rather than the
// command's whole flag list (docs/cli.md "Streams and exit codes"):
//
//	sandboxd run: unknown flag --bogus (see sandboxd help run)
//
// Help that was asked for (-h) still prints the full usage. done is true
// when the command must return code at once.
func parseFlags(fs *flag.FlagSet, stderr io.Writer, parse func() error) (code int, done bool) {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := parse()
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		usage()
		return exitOK, true
	}
	fmt.Fprintf(stderr, "%s: %s (see sandboxd help %s)\n", fs.Name(), flagProblem(fs, err), strings.TrimPrefix(fs.Name(), "sandboxd "))
	return exitUsage, true
}

// flagProblem rewrites one of package flag's parse errors in the CLI's
// words: flags are spelt with two dashes, an unknown flag gets the nearest
// defined one, a duration says what a duration looks like.
func flagProblem(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		s := "unknown flag --" + name
		if hint := flagHint(fs, name); hint != "" {
			s += "; " + hint
		}
		return s
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "--" + strings.TrimLeft(name, "-") + " needs a value"
	}
	// invalid value "x" for flag -name: reason
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if i := strings.Index(rest, " for flag -"); i >= 0 {
			val, tail := rest[:i], rest[i+len(" for flag -"):]
			name, reason, _ := strings.Cut(tail, ": ")
			if f := fs.Lookup(name); f != nil && isDuration(f) {
				return fmt.Sprintf("invalid value %s for --%s: want a duration such as 500ms, 30s or 2m", val, name)
			}
			return fmt.Sprintf("invalid value %s for --%s: %s", val, name, reason)
		}
	}
	// invalid boolean value "x" for -name: reason
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if i := strings.Index(rest, " for -"); i >= 0 {
			name, _, _ := strings.Cut(rest[i+len(" for -"):], ":")
			return fmt.Sprintf("invalid value %s for --%s: want true or false (--%s alone means true)", rest[:i], name, name)
		}
	}
	return msg
}

func isDuration(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(time.Duration)
	return ok
}

// flagAliases are flags users bring from other tools, with what to use
// here instead, when the command has it.
var flagAliases = map[string]struct{ needs, hint string }{
	"port":   {"addr", "use --addr HOST:PORT or $PORT"},
	"listen": {"addr", "use --addr HOST:PORT"},
	"bind":   {"addr", "use --addr HOST:PORT"},
	"config": {"ctx", "the call context (config, env, secrets) is --ctx FILE"},
}

// flagHint names what to use instead of the unknown flag name, or "".
func flagHint(fs *flag.FlagSet, name string) string {
	if a, ok := flagAliases[name]; ok && fs.Lookup(a.needs) != nil {
		return a.hint
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := nearest(name, names); s != "" {
		return "did you mean --" + s + "?"
	}
	return ""
}

// nearest returns the candidate closest to s by edit distance when it is
// close enough to be a slip (at most 2 edits, and fewer than half of s),
// or the only candidate s is a prefix of; "" otherwise.
func nearest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD && d*2 < len(s)+1 {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (bytes; flag and
// command names are ASCII). Inputs are short: one row of ints is enough.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // a name that long is no slip of the keyboard
	}
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cur := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return row[len(b)]
}
