package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the call (or load) failed; the error envelope is on stdout
	exitUsage = 2 // bad flags or arguments
)

// command is one subcommand: it gets the arguments after its name and
// returns the exit code. Subcommands register themselves in commands from
// their own files (init), so adding one never edits the dispatch.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func init() {
	commands["run"] = command{"run one call of a tool and print the result envelope", cmdRun}
	commands["version"] = command{"print the version, the commit it was built from and the Go toolchain", func(_ context.Context, _ []string, _ io.Reader, stdout, _ io.Writer) int {
		bi, ok := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(stampedVersion, bi, ok))
		return exitOK
	}}
}

func usageText() string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("sandboxd runs tool handlers compiled to WebAssembly inside a sandbox.\n\nUsage:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  sandboxd %-12s %s\n", n, commands[n].summary)
	}
	b.WriteString("  sandboxd help COMMAND  show the flags of a command\n")
	return b.String()
}

// commandHint is "; did you mean X?" for the command nearest name, or "".
func commandHint(name string) string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	if s := nearest(strings.TrimLeft(name, "-"), names); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// run is the whole CLI: it parses args and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return exitUsage
	}
	switch args[0] {
	case "--version":
		args = []string{"version"}
	case "help", "-h", "-help", "--help":
		switch {
		case len(args) > 2:
			fmt.Fprintf(stderr, "sandboxd help: one command at most, got %s\n\n%s", strings.Join(args[1:], " "), usageText())
			return exitUsage
		case len(args) == 2:
			c, ok := commands[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "sandboxd help: unknown command %q%s (sandboxd help lists the commands)\n", args[1], commandHint(args[1]))
				return exitUsage
			}
			return showHelp(ctx, c, stdin, stdout)
		}
		fmt.Fprint(stdout, usageText())
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandboxd: unknown command %q%s (sandboxd help lists the commands)\n", args[0], commandHint(args[0]))
		return exitUsage
	}
	if wantsHelp(args[1:]) {
		return showHelp(ctx, c, stdin, stdout)
	}
	return c.run(ctx, args[1:], stdin, stdout, stderr)
}

// showHelp prints a command's usage on stdout and returns 0: help that was
// asked for (sandboxd help CMD, sandboxd CMD --help) is the command's
// output, while usage printed for a bad flag goes to stderr with exit 2.
// Every command prints its usage to its stderr writer and returns 0 on -h.
func showHelp(ctx context.Context, c command, stdin io.Reader, stdout io.Writer) int {
	return c.run(ctx, []string{"-h"}, stdin, stdout, stdout)
}

// wantsHelp reports whether args, the arguments after a command name, ask
// for help (-h, -help or --help before a "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		manifestPath = fs.String("manifest", "", "tool manifest (JSON); without it, the bundled example tool runs")
		inputPath    = fs.String("input", "", "input JSON file, or - for stdin (required with --manifest)")
		ctxPath      = fs.String("ctx", "", "call context JSON file: {tenantId, runId, requestId?, projectId?, orgId?, idempotencyKey?, settings?, env?, config?, secrets?}")
		timeout      = fs.Duration("timeout", executor.DefaultTimeout, "wall deadline for the call")
		envs         stringList
	)
	fs.Var(&envs, "env", "NAME=VALUE for a needsSpec.env value (repeatable)")
	recordPath := fs.String("record", "", "write a recording of the call to this file (mode 0600): every host answer, so that sandboxd replay FILE re-runs it offline (docs/replay.md)")
	recordMax := fs.Int64("record-max-bytes", executor.DefaultRecordMaxBytes, "cap on a --record recording's answers; past it the recording is truncated (and cannot be replayed)")
	eventsDest := fs.String("events", "", "write the call's lifecycle events (pending → in_progress → completed|failed) as JSON lines to this file, or - for stderr (as serve; stdout carries only the envelope)")
	var execOpts execFlags
	execOpts.register(fs)
	var ociOpts ociFlags
	ociOpts.register(fs, false)
	var egressOpts egressFlags
	egressOpts.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandboxd run [--manifest tool.json --input input.json|-] [flags]\n\n"+
			"Runs one call and prints exactly one JSON envelope on stdout:\n"+
			"  {\"v\":2,\"kind\":\"result\",\"output\":…,\"usage\":{…}}   exit 0\n"+
			"  {\"v\":2,\"kind\":\"error\",\"code\":…,\"message\":…}    exit 1\n"+
			"Bad flags exit 2. Diagnostics and guest output go to stderr.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandboxd run: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *timeout <= 0 {
		return usage("--timeout must be positive, got %s", *timeout)
	}
	if *recordMax <= 0 {
		return usage("--record-max-bytes must be positive, got %d", *recordMax)
	}
	cc := executor.CallContext{TenantID: "local", RunID: newRunID()}
	if *ctxPath != "" {
		b, err := os.ReadFile(*ctxPath)
		if err != nil {
			return usage("--ctx: %v", err)
		}
		if err := parseCallContext(b, &cc); err != nil {
			return usage("--ctx %s: %v", *ctxPath, err)
		}
	}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usage("--env wants NAME=VALUE, got %q", kv)
		}
		if cc.Env == nil {
			cc.Env = map[string]string{}
		}
		cc.Env[k] = v
	}

	var (
		manifestJSON, input []byte
		loadOpts            []executor.LoadOption
		err                 error
	)
	if *manifestPath == "" {
		fmt.Fprintln(stderr, "sandboxd run: no --manifest given; running the bundled example tool acme.echo")
		manifestJSON = examples.EchoManifest
		loadOpts = append(loadOpts, executor.WithModule(examples.EchoWasm))
		input = examples.EchoInput
		if *inputPath != "" {
			if input, err = readInput(*inputPath, stdin); err != nil {
				return usage("--input: %v", err)
			}
		}
	} else {
		if *inputPath == "" {
			return usage("--input is required with --manifest (use - for stdin)")
		}
		if manifestJSON, err = os.ReadFile(*manifestPath); err != nil {
			return usage("--manifest: %v", err)
		}
		if input, err = readInput(*inputPath, stdin); err != nil {
			return usage("--input: %v", err)
		}
		abs, err := filepath.Abs(*manifestPath)
		if err != nil {
			return usage("--manifest: %v", err)
		}
		loadOpts = append(loadOpts, executor.WithBaseDir(filepath.Dir(abs)))
	}

	cfg := executor.NewConfig().
		WithDevMode(true).
		WithDefaultTimeout(*timeout).
		WithGuestOutput(stderr, stderr).
		WithPoolSize(0) // one call: a pre-warmed pool would only compete with it
	cfg, err = execOpts.apply(cfg)
	if err != nil {
		return usage("%v", err)
	}
	if cfg, err = egressOpts.apply(cfg); err != nil {
		return usage("%v", err)
	}
	if *eventsDest != "" {
		rec, err := events.Open(*eventsDest, stderr) // "-" → stderr: stdout is exactly one JSON document
		if err != nil {
			return usage("--events: %v", err)
		}
		defer rec.Close()
		cfg = cfg.WithCallObserver(rec.Observe)
	}
	ociOpts.log = newDownloadNotes(stderr) // large downloads are reported, as serve logs them
	oci, err := ociOpts.resolver()
	if err != nil {
		return usage("%v", err)
	}
	defer oci.Close()
	cfg = cfg.WithResolver(oci)
	exec, err := executor.New(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd run: %v\n", err)
		return emit(stdout, stderr, nil, toolerr.Wrap(toolerr.Internal, err, "cannot start the executor"))
	}
	defer exec.Close(context.Background())

	callCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	tool, err := exec.Load(callCtx, manifestJSON, loadOpts...)
	if err != nil {
		return emit(stdout, stderr, nil, err)
	}
	req := executor.Request{Input: input, Context: cc, Timeout: *timeout, TimeoutSource: executor.TimeoutSource{Name: "--timeout"}}
	if *recordPath != "" {
		opts := executor.RecordOptions{MaxBytes: *recordMax}
		if *manifestPath != "" {
			opts.Manifest, _ = filepath.Abs(*manifestPath)
		}
		req.Record = executor.NewRecorder(opts)
	}
	res, err := tool.Invoke(callCtx, req)
	if req.Record != nil {
		if werr := writeRecording(*recordPath, req.Record); werr != nil {
			fmt.Fprintf(stderr, "sandboxd run: --record: %v\n", werr)
		} else if req.Record.Truncated() {
			fmt.Fprintf(stderr, "sandboxd run: the recording %s was truncated at its cap (--record-max-bytes %d): it cannot be replayed\n", *recordPath, *recordMax)
		}
	}
	return emit(stdout, stderr, res, err)
}

// emit prints the envelope for the outcome and returns the exit code.
func emit(stdout, stderr io.Writer, res *executor.Result, err error) int {
	b, merr := json.Marshal(executor.Envelope(res, err))
	if merr != nil {
		fmt.Fprintf(stderr, "sandboxd run: cannot encode the result: %v\n", merr)
		b, _ = json.Marshal(executor.Envelope(nil, toolerr.Wrap(toolerr.Internal, merr, "cannot encode the result")))
		err = merr
	}
	fmt.Fprintf(stdout, "%s\n", b)
	if err != nil {
		return exitError
	}
	return exitOK
}

func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(stdin, maxInputBytes+1))
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxInputBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte input cap", path, st.Size(), maxInputBytes)
	}
	return os.ReadFile(path)
}

// maxInputBytes matches the pack service's request body cap.
const maxInputBytes = 10 << 20

func parseCallContext(b []byte, cc *executor.CallContext) error {
	var doc executor.CallContext
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	*cc = doc.WithDefaults(cc.TenantID, cc.RunID)
	return nil
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
