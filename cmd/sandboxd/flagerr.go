package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/suggest"
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

// nearest returns the command or flag s is probably a slip for
// (suggest.Nearest: at most 2 edits, and at most half of s), or else the
// only one s abbreviates (suggest.Completion: "conf" → conformance); ""
// otherwise.
func nearest(s string, candidates []string) string {
	if n := suggest.Nearest(s, candidates); n != "" {
		return n
	}
	return suggest.Completion(s, candidates)
}
