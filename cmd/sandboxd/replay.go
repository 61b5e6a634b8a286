package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/executor"
)

// Exit codes of replay (docs/replay.md): 0 identical, 1 diverged, 2 an
// unusable recording (also a usage error, as for every command).
const (
	exitIdentical = 0
	exitDiverged  = 1
	exitUnusable  = 2
)

func init() {
	commands["replay"] = command{"re-run a recorded call offline (run --record) and say whether it is identical", cmdReplay}
}

// writeRecording writes rec to path, mode 0600 (it holds the call's input
// and responses).
func writeRecording(path string, rec *executor.Recorder) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := rec.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func cmdReplay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifestPath := fs.String("manifest", "", "tool manifest (JSON); default: the one named in the recording's header")
	modulePath := fs.String("module", "", "run this .wasm instead of the manifest's module (a regression check of a new build)")
	var execOpts execFlags
	execOpts.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandboxd replay FILE [--manifest tool.json] [--module handler.wasm] [flags]\n\n"+
			"Re-runs the call recorded in FILE (sandboxd run --record FILE) with every host answer\n"+
			"served from the file: no network, no clock, no entropy. Prints on stdout\n"+
			"  identical                     exit 0 (same output bytes, outcome and fuel)\n"+
			"  diverged: <first difference>  exit 1 (host call #N: the guest asked X, recorded Y; or the outcome, output or fuel)\n"+
			"A file that cannot be replayed (not a recording, unknown version, cut, truncated) exits 2.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var pos []string
	if code, done := parseFlags(fs, stderr, func() (err error) { pos, err = parseInterspersed(fs, args); return err }); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandboxd replay: "+format+"\n", a...)
		return exitUnusable
	}
	if len(pos) != 1 {
		return usage("want one recording FILE, got %d arguments (see sandboxd help replay)", len(pos))
	}
	path := pos[0]
	f, err := os.Open(path)
	if err != nil {
		return usage("%v", err)
	}
	rec, err := executor.ReadRecording(f)
	f.Close()
	if err != nil {
		return usage("%s is unusable: %v", path, err)
	}

	var manifestJSON []byte
	var loadOpts []executor.LoadOption
	mpath := *manifestPath
	if mpath == "" {
		mpath = rec.Header.Manifest
	}
	switch {
	case mpath != "":
		if manifestJSON, err = os.ReadFile(mpath); err != nil {
			return usage("the manifest: %v (pass --manifest)", err)
		}
		abs, err := filepath.Abs(mpath)
		if err != nil {
			return usage("the manifest: %v", err)
		}
		loadOpts = append(loadOpts, executor.WithBaseDir(filepath.Dir(abs)))
	case rec.Header.ToolID == "acme.echo": // run without --manifest: the bundled example
		manifestJSON = examples.EchoManifest
		loadOpts = append(loadOpts, executor.WithModule(examples.EchoWasm))
	default:
		return usage("the recording names no manifest: pass --manifest")
	}
	if *modulePath != "" {
		wasm, err := os.ReadFile(*modulePath)
		if err != nil {
			return usage("--module: %v", err)
		}
		loadOpts = append(loadOpts, executor.WithModule(wasm))
	}

	cfg := executor.NewConfig().WithDevMode(true).WithGuestOutput(stderr, stderr).WithPoolSize(0)
	if cfg, err = execOpts.apply(cfg); err != nil {
		return usage("%v", err)
	}
	exec, err := executor.New(ctx, cfg)
	if err != nil {
		return usage("cannot start the executor: %v", err)
	}
	defer exec.Close(context.Background())
	tool, err := exec.Load(ctx, manifestJSON, loadOpts...)
	if err != nil {
		return usage("cannot load the tool: %v", err)
	}
	rep, err := tool.Replay(ctx, rec)
	if err != nil {
		return usage("%s is unusable: %v", path, err)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stderr, "sandboxd replay: note: %s\n", n)
	}
	if rep.Identical {
		fuel := int64(0)
		if rep.Result != nil {
			fuel = rep.Result.Usage.Fuel
		}
		fmt.Fprintln(stdout, "identical")
		fmt.Fprintf(stderr, "sandboxd replay: %d host calls, outcome %s, fuel %d\n", len(rec.Calls), rec.Trailer.Outcome, fuel)
		return exitIdentical
	}
	fmt.Fprintf(stdout, "diverged: %s\n", strings.TrimSpace(rep.Divergence))
	return exitDiverged
}
