package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/deployenv"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/server"
)

func init() {
	commands["serve"] = command{"serve tools over HTTP as a Kindgi pack service (pack-protocol v2; --mcp adds MCP at /mcp)", cmdServe}
}

// tokenEnv is the environment variable holding the pack service token.
const tokenEnv = "KINDGI_PACK_SERVICE_TOKEN"

// serviceFlags are the flags serve and mcp share: where the tools come
// from, the service core's admission and drain settings, and the executor,
// OCI and egress flags.
type serviceFlags struct {
	index, moduleRoot, toolsDir, eventsDest, envCheck *string
	bundleMap, envelope, trustedKeys                  *string
	packID, packVersion, artifactVer                  *string
	dev, recycle, images                              *bool
	maxConc, queue, perTool, poolSize                 *int
	perTenant, tenantQueue                            *int
	drain, bodyTimeout, tenantCPU, tenantWindow       *time.Duration
	bodyMB                                            *int64
	otlpEndpoint                                      *string
	recordDir                                         *string // --record-failures
	recordSample, recordMaxFiles                      *int
	recordMaxMB, recordCallMax                        *int64
	noTraceparent                                     stringList
	exec                                              execFlags
	oci                                               ociFlags
	egress                                            egressFlags
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	f.index = fs.String("index", "", "Kindgi pack index (index.json), or oci://REF: an image carrying one (docs/packs.md \"Pack images\"); modules resolve under --module-root")
	f.moduleRoot = fs.String("module-root", "", "directory the index's modulePaths are relative to (default: the index's directory; with oci://, a path inside the image, default dist/ or the pack directory)")
	f.bundleMap = fs.String("bundle-map", "", "JSON file mapping the index's source modulePaths to files under --module-root (FILE or FILE#export; Kindgi's dist/bundle-map.json; with oci://, a path inside the image, default bundle-map.json when present)")
	f.envelope = fs.String("envelope", "", "refuse to boot (or reload) unless this kindgi-deploy-envelope/v1 verifies against --index and --trusted-keys")
	f.trustedKeys = fs.String("trusted-keys", "", "JSON file of trusted signing keys for --envelope: {\"keys\":[{\"keyId\",\"publicKey\"}]}")
	f.toolsDir = fs.String("tools", "", "pack directory: a Kindgi pack.json's tools and guardrails, else tool.json, *.tool.json and */tool.json")
	f.dev = fs.Bool("dev", false, "allow filesystem codeArtifactRefs (local development only)")
	f.eventsDest = fs.String("events", "", "write tool-call lifecycle events as JSON lines to this file, or - for stderr (as run), beside the process events")
	f.maxConc = fs.Int("max-concurrency", 0, "calls running at once (default $KINDGI_PACK_SERVICE_MAX_CONCURRENCY, else 16)")
	f.queue = fs.Int("queue", 0, "calls waiting for a slot before 503 (default 4 × max-concurrency; -1: none)")
	f.perTool = fs.Int("per-tool-concurrency", 0, "calls running at once per tool (default 3/4 of max-concurrency)")
	f.perTenant = fs.Int("per-tenant-concurrency", 0, "calls running at once per tenant (ctx.tenantId; MCP: the Sandboxd-Tenant header); calls over it wait in their tenant's queue and free slots go round robin across tenants (default half of max-concurrency)")
	f.tenantQueue = fs.Int("per-tenant-queue", 0, "calls one tenant may have waiting before 503 tenant-queue-full (default a quarter of --queue, at least 1; -1: none)")
	f.tenantCPU = fs.Duration("per-tenant-cpu-budget", 0, "guest CPU time (the calls' usage.cpuMs) one tenant may use per --per-tenant-cpu-window; over it, 503 tenant-cpu-budget with Retry-After the rest of the window (0: no budget)")
	f.tenantWindow = fs.Duration("per-tenant-cpu-window", server.DefaultCPUWindow, "the window of --per-tenant-cpu-budget")
	f.drain = fs.Duration("drain-timeout", server.DefaultDrainTimeout, "how long SIGTERM waits for in-flight calls")
	f.bodyMB = fs.Int64("body-budget-mb", server.DefaultBodyBudget>>20, "MiB held for request bodies at once across all connections and routes (/v1/invoke, /mcp), charged before a body is read (a body that does not fit gets 503)")
	f.bodyTimeout = fs.Duration("body-timeout", server.DefaultBodyTimeout, "how long a request body may take to arrive, on every route, whatever kindgi-timeout-ms says")
	f.envCheck = fs.String("env-check", "strict", "strict: not ready while the index's required env is missing; warn: ready anyway")
	f.packID = fs.String("pack-id", "", "packId for --tools (default sandboxd)")
	f.packVersion = fs.String("pack-version", "", "packVersion for --tools (default 0.0.0)")
	f.artifactVer = fs.String("artifact-version", "", "artifactVersion for --tools (default: a digest of the tools)")
	f.recycle = fs.Bool("recycle", true, "reset used context-isolated instances to their post-initialisation state and reuse them, instead of instantiating for every call (strict tools never recycle)")
	f.images = fs.Bool("instance-images", true, "load new context-isolated and strict instances from their tool's post-initialisation image (copy-on-write) instead of running each one's _initialize; false gives every instance the random bytes and clock readings of its own _initialize")
	f.otlpEndpoint = fs.String("otlp-endpoint", "", "export an OpenTelemetry span per call (and its stages and egress requests) over OTLP/HTTP to this collector URL, e.g. http://collector:4318 (default: off, unless $OTEL_EXPORTER_OTLP_ENDPOINT or $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set)")
	fs.Var(&f.noTraceparent, "otlp-no-traceparent", "with tracing on: guest HTTP requests to this destination ([scheme://]host[:port], the allowlist grammar) carry no traceparent header (repeatable)")
	f.recordDir = fs.String("record-failures", "", "keep a recording (docs/replay.md) of every call that fails with handler-error, handler-trap, limits-exceeded or output-validation-failed in this directory (0700; files 0600; its call record names the file); posture none calls then run on fresh instances")
	f.recordSample = fs.Int("record-sample", 0, "with --record-failures: also keep the recording of one call in N, whatever its outcome (canaries)")
	f.recordMaxFiles = fs.Int("record-max-files", server.DefaultRecordMaxFiles, "most recordings --record-failures keeps; past it the oldest is removed")
	f.recordMaxMB = fs.Int64("record-max-mb", server.DefaultRecordMaxBytes>>20, "most MiB of recordings --record-failures keeps; past it the oldest are removed")
	f.recordCallMax = fs.Int64("record-max-bytes", executor.DefaultRecordMaxBytes, "cap on one recording's answers (past it the recording is truncated and cannot be replayed)")
	f.poolSize = fs.Int("pool-size", -1, "most pre-warmed instances per context-isolated/strict tool; pools grow toward it under load and shrink when idle, within a 512 MiB budget for all tools (-1: the executor's default, 8)")
	f.exec.register(fs)
	f.oci.register(fs, false)
	f.egress.register(fs)
}

// check adds a problem for every inconsistent flag; it returns the
// concurrency cap (the flag or its environment variable).
func (f *serviceFlags) check(bad func(format string, a ...any)) int {
	if (*f.index == "") == (*f.toolsDir == "") {
		bad("give exactly one of --index and --tools")
	}
	if *f.moduleRoot != "" && *f.index == "" {
		bad("--module-root goes with --index")
	}
	if *f.bundleMap != "" && *f.index == "" {
		bad("--bundle-map goes with --index")
	}
	if *f.envelope != "" && (*f.index == "" || *f.trustedKeys == "") {
		bad("--envelope needs --index and --trusted-keys")
	}
	if *f.trustedKeys != "" && *f.envelope == "" {
		bad("--trusted-keys goes with --envelope")
	}
	if *f.envCheck != "strict" && *f.envCheck != "warn" {
		bad("--env-check must be strict or warn, not %q", *f.envCheck)
	}
	if *f.drain <= 0 {
		bad("--drain-timeout must be positive")
	}
	if len(f.noTraceparent) > 0 && !server.TracingConfigured(*f.otlpEndpoint) {
		bad("--otlp-no-traceparent goes with --otlp-endpoint (or $OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	mc := *f.maxConc
	if mc == 0 {
		if v := os.Getenv("KINDGI_PACK_SERVICE_MAX_CONCURRENCY"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				bad("KINDGI_PACK_SERVICE_MAX_CONCURRENCY must be a positive integer, not %q", v)
			}
			mc = n
		}
	}
	if mc < 0 || *f.perTool < 0 || *f.queue < -1 {
		bad("--max-concurrency, --per-tool-concurrency must be positive and --queue ≥ -1")
	}
	if *f.perTenant < 0 || *f.tenantQueue < -1 || *f.tenantCPU < 0 || *f.tenantWindow <= 0 {
		bad("--per-tenant-concurrency and --per-tenant-cpu-budget must not be negative, --per-tenant-queue ≥ -1 and --per-tenant-cpu-window positive")
	}
	if _, err := f.exec.apply(executor.NewConfig()); err != nil {
		bad("%v", err)
	}
	return mc
}

// service is a booted executor and server core.
type service struct {
	srv *server.Server
	oci *artifact.OCI
	// close releases everything boot opened, in order.
	close func()
}

// boot validates the flags, starts the executor and loads the tools into
// a server core. Guest stdout goes to guestOut, guest stderr to stderr.
// It returns the exit code to stop with when it fails (ok false); it has
// logged why (config-invalid, boot-failed, or stopped during boot).
func (f *serviceFlags) boot(ctx context.Context, plog *slog.Logger, token string, mc int, guestOut, stderr io.Writer) (svc *service, code int, ok bool) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(kind string, problems any) (*service, int, bool) {
		plog.Error(kind, "problems", problems)
		closeAll()
		return nil, exitError, false
	}
	cfg, err := f.exec.apply(executor.NewConfig())
	if err != nil {
		return fail("config-invalid", []string{err.Error()})
	}
	if *f.recordSample < 0 || *f.recordSample > 0 && *f.recordDir == "" {
		return fail("config-invalid", []string{"--record-sample needs --record-failures DIR (where the recordings go) and a positive N"})
	}
	if *f.recordDir != "" && (*f.recordMaxFiles <= 0 || *f.recordMaxMB <= 0 || *f.recordCallMax <= 0) {
		return fail("config-invalid", []string{"--record-max-files, --record-max-mb and --record-max-bytes must be positive"})
	}
	var rec *events.Recorder
	if *f.eventsDest != "" {
		if rec, err = events.Open(*f.eventsDest, stderr); err != nil {
			return fail("config-invalid", []string{"--events: " + err.Error()})
		}
		closers = append(closers, func() { rec.Close() })
	}
	cfg = cfg.
		WithDevMode(*f.dev).
		WithGuestOutput(guestOut, stderr)
	// Guest log lines become JSON process events too, so stderr stays
	// machine-readable (guest stderr itself is forwarded line by line).
	levels := [...]string{"debug", "info", "warn", "error"}
	cfg = cfg.WithLogSink(func(r executor.LogRecord) {
		plog.Info("guest-log", "tool", r.ToolID, "guestLevel", levels[min(max(r.Level, 0), 3)], "message", r.Msg)
	})
	if rec != nil {
		cfg = cfg.WithCallObserver(rec.Observe)
	}
	cfg = cfg.WithRecycling(*f.recycle).WithInstanceImages(*f.images).
		WithRecordable(*f.recordDir != "") // recorded calls run on pooled instances (docs/replay.md)
	if *f.poolSize >= 0 {
		cfg = cfg.WithPoolSize(*f.poolSize)
	}
	f.oci.log = plog // artifact-resolve/-download/-failed events: boot progress
	oci, err := f.oci.resolver()
	if err != nil {
		return fail("config-invalid", []string{err.Error()})
	}
	closers = append(closers, func() { oci.Close() })
	cfg = cfg.WithResolver(oci)
	if cfg, err = f.egress.apply(cfg); err != nil {
		return fail("config-invalid", []string{err.Error()})
	}
	exec, err := executor.New(ctx, cfg)
	if err != nil {
		return fail("boot-failed", []server.Problem{{Message: err.Error()}})
	}
	// Closing must not hold up the exit behind a compile still running (a
	// boot or reload abandoned at SIGTERM): it gets a bounded wait.
	closers = append(closers, func() { closeWithin(2*time.Second, func() { _ = exec.Close(context.Background()) }) })

	var src server.Source
	if ref, ok := strings.CutPrefix(*f.index, ociIndexPrefix); ok {
		ois := server.OCIIndexSource{Ref: ref, OCI: oci, ModuleRoot: *f.moduleRoot, BundleMap: *f.bundleMap}
		if *f.envelope != "" {
			if ois.Verify, err = imageEnvelopeVerifier(ctx, *f.envelope, *f.trustedKeys, ref); err != nil {
				return fail("config-invalid", []string{err.Error()})
			}
		}
		src = ois
	} else if *f.index != "" {
		root := *f.moduleRoot
		if root == "" {
			root = filepath.Dir(*f.index)
		}
		is := server.IndexSource{Index: *f.index, ModuleRoot: root}
		if *f.bundleMap != "" {
			if is.BundleMap, err = pack.ReadBundleMap(*f.bundleMap); err != nil {
				return fail("config-invalid", []string{"--bundle-map: " + err.Error()})
			}
		}
		if *f.envelope != "" {
			if is.Verify, err = envelopeVerifier(ctx, *f.envelope, *f.trustedKeys, oci); err != nil {
				return fail("config-invalid", []string{err.Error()})
			}
		}
		src = is
	} else {
		src = server.DirSource{Dir: *f.toolsDir, PackID: *f.packID, PackVersion: *f.packVersion, ArtifactVersion: *f.artifactVer}
	}
	var tracing *server.Tracing
	if server.TracingConfigured(*f.otlpEndpoint) {
		var noHeader []egress.Entry
		for _, d := range f.noTraceparent {
			e, err := egress.ParseEntry(d)
			if err != nil {
				return fail("config-invalid", []string{"--otlp-no-traceparent: " + err.Error()})
			}
			noHeader = append(noHeader, e)
		}
		if tracing, err = server.NewTracing(ctx, server.TracingOptions{Endpoint: *f.otlpEndpoint, NoTraceparent: noHeader, ServiceVersion: implVersion()}); err != nil {
			return fail("config-invalid", []string{err.Error()})
		}
		closers = append(closers, func() { // after the server's Close: its last spans go out
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tracing.Shutdown(sctx)
		})
	}
	// SIGTERM during boot stops it: Load stops waiting for a compile when
	// ctx is done (the compile itself cannot be interrupted; F16).
	srv, err := server.New(ctx, exec, src, server.Options{
		Token: token, MaxConcurrency: mc, QueueSize: *f.queue, PerToolConcurrency: *f.perTool,
		PerTenantConcurrency: *f.perTenant, PerTenantQueue: *f.tenantQueue,
		PerTenantCPUBudget: *f.tenantCPU, PerTenantCPUWindow: *f.tenantWindow,
		DrainTimeout: *f.drain, EnvCheckWarn: *f.envCheck == "warn", Log: plog,
		BodyBudget: *f.bodyMB << 20, BodyTimeout: *f.bodyTimeout,
		Tracing: tracing, Version: implVersion(),
		Record: server.Recordings{Dir: *f.recordDir, Failures: *f.recordDir != "", Sample: *f.recordSample,
			MaxFiles: *f.recordMaxFiles, MaxBytes: *f.recordMaxMB << 20, CallMaxBytes: *f.recordCallMax},
	})
	if err != nil && ctx.Err() != nil {
		plog.Info("stopped", "during", "boot")
		closeAll()
		return nil, exitOK, false // SIGTERM during boot: nothing was serving yet
	}
	if err != nil {
		var be *server.BootError
		if errors.As(err, &be) {
			return fail("boot-failed", be.Problems)
		}
		return fail("boot-failed", []server.Problem{{Message: err.Error()}})
	}
	closers = append(closers, func() { srv.Close(context.Background()) })
	return &service{srv: srv, oci: oci, close: closeAll}, 0, true
}

// reloadOnHUP reloads the tools on every SIGHUP until ctx is done.
func (svc *service) reloadOnHUP(ctx context.Context) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-hup:
				svc.oci.ForgetTags()    // a reload re-resolves tags, whatever the tag TTL
				_ = svc.srv.Reload(ctx) // failures are logged as reload-failed; SIGTERM abandons a reload
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { signal.Stop(hup) }
}

// cmdServe runs the pack service until ctx is done (SIGTERM / interrupt),
// then drains and returns 0. SIGHUP reloads the tools. Process events are
// JSON lines on stderr; guest stdout/stderr go to stdout/stderr line by
// line; tool-call lifecycle events go to --events.
func cmdServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr       = fs.String("addr", "", "listen address HOST:PORT (default: --host and $PORT)")
		host       = fs.String("host", "127.0.0.1", "listen host when --addr is not given")
		withMCP    = fs.Bool("mcp", false, "also serve the tools over MCP (Streamable HTTP) at /mcp, with Authorization: Bearer $"+tokenEnv+" (see docs/mcp.md)")
		mcpTenant  = fs.String("mcp-tenant-header", mcp.DefaultTenantHeader, "with --mcp: the request header whose value is an MCP call's tenant (for per-tenant admission; absent: tenant mcp)")
		mcpOrigins stringList
	)
	fs.Var(&mcpOrigins, "mcp-allow-origin", "a browser Origin (scheme://host[:port]) admitted at /mcp besides loopback ones (repeatable)")
	var sf serviceFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s=… sandboxd serve (--index index.json|oci://REF [--module-root DIR] | --tools DIR) [flags]\n\n"+
			"Serves the tools as a Kindgi pack service: POST /v1/invoke, GET /v1/info, /v1/tools,\n"+
			"/healthz, /readyz, /metrics (and POST /mcp with --mcp). The listen port is $PORT\n"+
			"(0 picks one; default 8787) unless --addr is given. Process events (listening,\n"+
			"draining, stopped, boot-failed, config-invalid, call) are JSON lines on stderr.\n"+
			"SIGTERM drains and exits 0; SIGHUP reloads the tools.\n\nFlags:\n", tokenEnv)
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	if *sf.bodyMB <= 0 || *sf.bodyTimeout <= 0 {
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
	mc := sf.check(bad)
	if len(mcpOrigins) > 0 && !*withMCP {
		bad("--mcp-allow-origin goes with --mcp")
	}
	if *mcpTenant != mcp.DefaultTenantHeader && !*withMCP {
		bad("--mcp-tenant-header goes with --mcp")
	}
	if !httpToken(*mcpTenant) {
		bad("--mcp-tenant-header must be an HTTP header name, not %q", *mcpTenant)
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
	if len(problems) > 0 {
		plog.Error("config-invalid", "problems", problems)
		return exitError
	}

	svc, code, ok := sf.boot(ctx, plog, token, mc, stdout, stderr)
	if !ok {
		return code
	}
	defer svc.close()
	if *withMCP {
		ms, ok := svc.mcp(plog, *mcpTenant)
		if !ok {
			return exitError
		}
		svc.srv.Handle("/mcp", ms.Handler(mcp.HTTPOptions{AllowedOrigins: mcpOrigins}))
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		plog.Error("boot-failed", "problems", []server.Problem{{Message: err.Error()}})
		return exitError
	}
	defer svc.reloadOnHUP(ctx)()
	if err := svc.srv.Serve(ctx, ln); err != nil {
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

// ociIndexPrefix marks an --index carried in an OCI image.
const ociIndexPrefix = "oci://"

// imageEnvelopeVerifier is envelopeVerifier for an index read from the
// image ref (serve --index oci://REF): the envelope's imageRef must name
// ref's repository, and its imageDigest is checked against the digest
// each load actually resolved, not asked of the registry again.
func imageEnvelopeVerifier(ctx context.Context, envelopeFile, keysFile, ref string) (func([]byte, *artifact.Artifact) error, error) {
	env, err := deployenv.ReadFile(envelopeFile)
	if err != nil {
		return nil, fmt.Errorf("--envelope: %w", err)
	}
	keys, err := deployenv.ReadTrustedKeys(keysFile)
	if err != nil {
		return nil, fmt.Errorf("--trusted-keys: %w", err)
	}
	return func(index []byte, img *artifact.Artifact) error {
		served := func(_ context.Context, imageRef string) (string, error) {
			if !artifact.SameRepository(imageRef, ref) {
				return "", fmt.Errorf("the envelope's imageRef %s is not the repository served (%s)", imageRef, ref)
			}
			return img.Digest, nil
		}
		return deployenv.Verify(ctx, env, deployenv.Options{Trusted: keys, Index: index, ImageDigest: served})
	}, nil
}

// envelopeVerifier reads a deploy envelope and the trusted keys and
// returns the check every load of the index must pass: the envelope's
// signature, signer and fields (deployenv.Verify) against the index's
// exact bytes, the image digest asked of the registry for its imageRef.
func envelopeVerifier(ctx context.Context, envelopeFile, keysFile string, oci *artifact.OCI) (func([]byte) error, error) {
	env, err := deployenv.ReadFile(envelopeFile)
	if err != nil {
		return nil, fmt.Errorf("--envelope: %w", err)
	}
	keys, err := deployenv.ReadTrustedKeys(keysFile)
	if err != nil {
		return nil, fmt.Errorf("--trusted-keys: %w", err)
	}
	digest := func(ctx context.Context, ref string) (string, error) {
		art, err := oci.Inspect(ctx, ref)
		if err != nil {
			return "", err
		}
		return art.Digest, nil
	}
	return func(index []byte) error {
		return deployenv.Verify(ctx, env, deployenv.Options{Trusted: keys, Index: index, ImageDigest: digest})
	}, nil
}

// httpToken reports whether s is a header name (an RFC 9110 token).
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
