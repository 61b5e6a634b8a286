package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

func init() {
	commands["serve"] = command{"serve tools over HTTP as a Kindgi pack service (pack-protocol v2)", cmdServe}
}

// tokenEnv is the environment variable holding the pack service token.
const tokenEnv = "KINDGI_PACK_SERVICE_TOKEN"

// cmdServe runs the pack service until ctx is done (SIGTERM / interrupt),
// then drains and returns 0. SIGHUP reloads the tools. Process events are
// JSON lines on stderr; guest stdout/stderr go to stdout/stderr line by
// line; tool-call lifecycle events go to --events.
func cmdServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		index       = fs.String("index", "", "Kindgi pack index (index.json); modules resolve under --module-root")
		moduleRoot  = fs.String("module-root", "", "directory the index's modulePaths are relative to (default: the index's directory)")
		toolsDir    = fs.String("tools", "", "directory of tool manifests (*.json and */tool.json)")
		addr        = fs.String("addr", "", "listen address HOST:PORT (default: --host and $PORT)")
		host        = fs.String("host", "127.0.0.1", "listen host when --addr is not given")
		dev         = fs.Bool("dev", false, "allow filesystem codeArtifactRefs (local development only)")
		eventsDest  = fs.String("events", "", "write tool-call lifecycle events as JSON lines to this file, or - for stderr (as run), beside the process events")
		maxConc     = fs.Int("max-concurrency", 0, "calls running at once (default $KINDGI_PACK_SERVICE_MAX_CONCURRENCY, else 16)")
		queue       = fs.Int("queue", 0, "calls waiting for a slot before 503 (default 4 × max-concurrency; -1: none)")
		perTool     = fs.Int("per-tool-concurrency", 0, "calls running at once per tool (default 3/4 of max-concurrency)")
		drain       = fs.Duration("drain-timeout", server.DefaultDrainTimeout, "how long SIGTERM waits for in-flight calls")
		bodyMB      = fs.Int64("body-budget-mb", server.DefaultBodyBudget>>20, "MiB held for invoke request bodies at once across all connections, charged before a body is read (a body that does not fit gets 503)")
		bodyTimeout = fs.Duration("body-timeout", server.DefaultBodyTimeout, "how long an invoke request body may take to arrive, whatever kindgi-timeout-ms says")
		envCheck    = fs.String("env-check", "strict", "strict: not ready while the index's required env is missing; warn: ready anyway")
		packID      = fs.String("pack-id", "", "packId for --tools (default sandboxd)")
		packVersion = fs.String("pack-version", "", "packVersion for --tools (default 0.0.0)")
		artifactVer = fs.String("artifact-version", "", "artifactVersion for --tools (default: a digest of the tools)")
		recycle     = fs.Bool("recycle", true, "reset used context-isolated instances to their post-initialisation state and reuse them, instead of instantiating for every call (strict tools never recycle)")
		poolSize    = fs.Int("pool-size", -1, "most pre-warmed instances per context-isolated/strict tool; pools grow toward it under load and shrink when idle, within a 512 MiB budget for all tools (-1: the executor's default, 8)")
	)
	var execOpts execFlags
	execOpts.register(fs)
	var ociOpts ociFlags
	ociOpts.register(fs, false)
	var egressOpts egressFlags
	egressOpts.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s=… sandboxd serve (--index index.json [--module-root DIR] | --tools DIR) [flags]\n\n"+
			"Serves the tools as a Kindgi pack service: POST /v1/invoke, GET /v1/info, /v1/tools,\n"+
			"/healthz, /readyz, /metrics. The listen port is $PORT (0 picks one; default 8787)\n"+
			"unless --addr is given. Process events (listening, draining, stopped, boot-failed,\n"+
			"config-invalid, call) are JSON lines on stderr. SIGTERM drains and exits 0;\n"+
			"SIGHUP reloads the tools.\n\nFlags:\n", tokenEnv)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *bodyMB <= 0 || *bodyTimeout <= 0 {
		fmt.Fprintln(stderr, "serve: --body-budget-mb and --body-timeout must be positive")
		return exitUsage
	}
	plog := server.NewLogger(stderr)
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	token := strings.TrimSpace(os.Getenv(tokenEnv))
	// The token never reaches pack code: it leaves the environment before
	// anything is loaded.
	_ = os.Unsetenv(tokenEnv)
	if !server.ValidToken(token) {
		bad("%s must be set to a non-empty printable ASCII token", tokenEnv)
	}
	if fs.NArg() > 0 {
		bad("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if (*index == "") == (*toolsDir == "") {
		bad("give exactly one of --index and --tools")
	}
	if *moduleRoot != "" && *index == "" {
		bad("--module-root goes with --index")
	}
	if *envCheck != "strict" && *envCheck != "warn" {
		bad("--env-check must be strict or warn, not %q", *envCheck)
	}
	if *drain <= 0 {
		bad("--drain-timeout must be positive")
	}
	mc := *maxConc
	if mc == 0 {
		if v := os.Getenv("KINDGI_PACK_SERVICE_MAX_CONCURRENCY"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				bad("KINDGI_PACK_SERVICE_MAX_CONCURRENCY must be a positive integer, not %q", v)
			}
			mc = n
		}
	}
	if mc < 0 || *perTool < 0 || *queue < -1 {
		bad("--max-concurrency, --per-tool-concurrency must be positive and --queue ≥ -1")
	}
	listen := *addr
	if listen == "" {
		port := os.Getenv("PORT")
		if port == "" {
			port = "8787"
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad("PORT must be a port number, not %q", port)
		}
		listen = net.JoinHostPort(*host, port)
	}
	cfg, err := execOpts.apply(executor.NewConfig())
	if err != nil {
		bad("%v", err)
	}
	if len(problems) > 0 {
		plog.Error("config-invalid", "problems", problems)
		return exitError
	}

	var rec *events.Recorder
	if *eventsDest != "" {
		var err error
		if rec, err = events.Open(*eventsDest, stderr); err != nil {
			plog.Error("config-invalid", "problems", []string{"--events: " + err.Error()})
			return exitError
		}
		defer rec.Close()
	}
	cfg = cfg.
		WithDevMode(*dev).
		WithGuestOutput(stdout, stderr)
	// Guest log lines become JSON process events too, so stderr stays
	// machine-readable (guest stderr itself is forwarded line by line).
	levels := [...]string{"debug", "info", "warn", "error"}
	cfg = cfg.WithLogSink(func(r executor.LogRecord) {
		plog.Info("guest-log", "tool", r.ToolID, "guestLevel", levels[min(max(r.Level, 0), 3)], "message", r.Msg)
	})
	if rec != nil {
		cfg = cfg.WithCallObserver(rec.Observe)
	}
	cfg = cfg.WithRecycling(*recycle)
	if *poolSize >= 0 {
		cfg = cfg.WithPoolSize(*poolSize)
	}
	ociOpts.log = plog // artifact-resolve/-download/-failed events: boot progress
	oci, err := ociOpts.resolver()
	if err != nil {
		plog.Error("config-invalid", "problems", []string{err.Error()})
		return exitError
	}
	defer oci.Close()
	cfg = cfg.WithResolver(oci)
	if cfg, err = egressOpts.apply(cfg); err != nil {
		plog.Error("config-invalid", "problems", []string{err.Error()})
		return exitError
	}
	exec, err := executor.New(ctx, cfg)
	if err != nil {
		plog.Error("boot-failed", "problems", []server.Problem{{Message: err.Error()}})
		return exitError
	}
	// Closing must not hold up the exit behind a compile still running (a
	// boot or reload abandoned at SIGTERM): it gets a bounded wait.
	defer closeWithin(2*time.Second, func() { _ = exec.Close(context.Background()) })

	var src server.Source
	if *index != "" {
		root := *moduleRoot
		if root == "" {
			root = filepath.Dir(*index)
		}
		src = server.IndexSource{Index: *index, ModuleRoot: root}
	} else {
		src = server.DirSource{Dir: *toolsDir, PackID: *packID, PackVersion: *packVersion, ArtifactVersion: *artifactVer}
	}
	// SIGTERM during boot stops it: Load stops waiting for a compile when
	// ctx is done (the compile itself cannot be interrupted; F16).
	srv, err := server.New(ctx, exec, src, server.Options{
		Token: token, MaxConcurrency: mc, QueueSize: *queue, PerToolConcurrency: *perTool,
		DrainTimeout: *drain, EnvCheckWarn: *envCheck == "warn", Log: plog,
		BodyBudget: *bodyMB << 20, BodyTimeout: *bodyTimeout,
	})
	if err != nil && ctx.Err() != nil {
		plog.Info("stopped", "during", "boot")
		return exitOK // SIGTERM during boot: nothing was serving yet
	}
	if err != nil {
		var be *server.BootError
		if errors.As(err, &be) {
			plog.Error("boot-failed", "problems", be.Problems)
		} else {
			plog.Error("boot-failed", "problems", []server.Problem{{Message: err.Error()}})
		}
		return exitError
	}
	defer srv.Close(context.Background())
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		plog.Error("boot-failed", "problems", []server.Problem{{Message: err.Error()}})
		return exitError
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				oci.ForgetTags()    // a reload re-resolves tags, whatever the tag TTL
				_ = srv.Reload(ctx) // failures are logged as reload-failed; SIGTERM abandons a reload
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := srv.Serve(ctx, ln); err != nil {
		plog.Error("stopped", "error", err.Error())
		return exitError
	}
	return exitOK
}

// closeWithin runs close and waits for it at most d.
func closeWithin(d time.Duration, close func()) {
	done := make(chan struct{})
	go func() {
		close()
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}
