package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// Transport constants of the pack protocol.
const (
	// MaxBodyBytes is the request body cap (413 above it).
	MaxBodyBytes = 10 << 20
	// DefaultTimeout applies when kindgi-timeout-ms is absent or invalid.
	DefaultTimeout = 120 * time.Second
	// MaxTimeout bounds kindgi-timeout-ms (larger values are clamped).
	MaxTimeout = 24 * time.Hour
	// DefaultDrainTimeout is how long SIGTERM waits for in-flight calls.
	DefaultDrainTimeout = 8 * time.Second
	// DefaultMaxConcurrency is the global concurrency cap when none is set.
	DefaultMaxConcurrency = 16
	// DefaultCPUWindow is the window of the per-tenant CPU budget.
	DefaultCPUWindow = 10 * time.Second
	// DefaultBodyBudget bounds the memory of request bodies being received
	// and parsed at once, across all connections (see Options.BodyBudget).
	DefaultBodyBudget = 128 << 20
	// DefaultBodyTimeout bounds how long a request body may take to arrive,
	// whatever kindgi-timeout-ms says (see Options.BodyTimeout).
	DefaultBodyTimeout = 30 * time.Second
	// UnknownToolLabel is the one metrics label every tool id that is not in
	// the serving catalog is counted under, so callers cannot mint series.
	UnknownToolLabel = "_unknown"
	// MaxLoggedIDBytes bounds a caller-chosen id (tool, check, tenant, run,
	// request) in process events; longer ones are cut and marked.
	MaxLoggedIDBytes = 256
)

// Header names.
const (
	HeaderToken       = "kindgi-pack-token"
	HeaderTimeout     = "kindgi-timeout-ms"
	HeaderRunID       = "kindgi-run-id"
	HeaderRequestID   = "kindgi-request-id"
	HeaderTraceparent = "traceparent"
	HeaderDuration    = "kindgi-duration-ms"
	HeaderArtifact    = "kindgi-artifact-version"
	// HeaderUsage carries the call's usage {"cpuMs","wallMs","peakMemMB"}
	// as JSON: the closed result shape has no room for it.
	HeaderUsage = "sandboxd-usage"
	// HeaderCallID carries the toolCallId of the call's lifecycle events.
	HeaderCallID = "sandboxd-call-id"
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// Token is the shared secret callers send in kindgi-pack-token. It must
	// be non-empty printable ASCII (New refuses anything else).
	Token string
	// MaxConcurrency caps calls running at once (default 16).
	MaxConcurrency int
	// QueueSize bounds calls waiting for a slot (default 4×MaxConcurrency;
	// negative: no queue, refuse at once). Beyond it: 503 + Retry-After.
	QueueSize int
	// PerToolConcurrency caps calls running at once per tool, so one slow
	// or hostile tool cannot take every slot (default: 3/4 of
	// MaxConcurrency, at least 1). Beyond it: 503 + Retry-After.
	PerToolConcurrency int
	// PerTenantConcurrency caps calls running at once per tenant (the call
	// context's tenantId), so that one tenant cannot hold every slot
	// (default: half of MaxConcurrency, at least 1). A call over it waits
	// in its tenant's queue; slots are handed out round robin across the
	// tenants with waiting calls (admission.go).
	PerTenantConcurrency int
	// PerTenantQueue bounds the calls one tenant may have waiting
	// (default: a quarter of QueueSize, at least 1; negative: none).
	// Beyond it: 503 + Retry-After, reason tenant-queue-full.
	PerTenantQueue int
	// PerTenantCPUBudget, when positive, is the guest CPU time (the
	// calls' own usage.cpuMs) a tenant may spend per PerTenantCPUWindow;
	// a tenant over it is refused (503, reason tenant-cpu-budget) with a
	// Retry-After of the rest of the window. Zero: no budget.
	PerTenantCPUBudget time.Duration
	// PerTenantCPUWindow is the CPU budget's window (default
	// DefaultCPUWindow); windows are aligned to multiples of it.
	PerTenantCPUWindow time.Duration
	// DrainTimeout bounds the wait for in-flight calls on drain (default 8 s).
	DrainTimeout time.Duration
	// BodyBudget bounds the bytes held for request bodies at once, across
	// all connections and every route (default DefaultBodyBudget). A body
	// is charged BEFORE it is read, from its Content-Length, or chunk by
	// chunk for a chunked body: twice its length on /v1/invoke (the body
	// and the input copied out of it), more where a route's reader copies
	// more (ReadBody). The charge is held until the call is over (on other
	// routes, until the handler returns). A body that does not fit is
	// refused with 503 + Retry-After without being read.
	BodyBudget int64
	// BodyTimeout bounds the time a body may take to arrive on every route,
	// independently of kindgi-timeout-ms (default DefaultBodyTimeout); the
	// call's own deadline applies too when it is earlier. Past it the read
	// fails, /v1/invoke answers deadline-exceeded, and the connection is
	// closed.
	BodyTimeout time.Duration
	// EnvCheckWarn keeps the service ready while required env names of the
	// pack index are missing (they are still listed in /v1/info).
	EnvCheckWarn bool
	// Log receives process events (see NewLogger); nil discards them.
	Log *slog.Logger
	// Version is the build's version for sandboxd_build_info (""
	// reads the binary's module version).
	Version string
	// Record, when its Dir is set, keeps recordings of failed or sampled
	// calls (recordings.go; serve --record-failures, --record-sample).
	Record Recordings
	// Tracing, when set, exports an OpenTelemetry span per call (see
	// NewTracing); nil: no tracing, and no cost on the call path.
	Tracing *Tracing
}

// Server is a pack service. It is an http.Handler; Serve runs it on a
// listener with the drain lifecycle. Create it with New; Close it to
// release its tools. Safe for concurrent use.
type Server struct {
	exec *executor.Executor
	src  Source
	opts Options
	log  *slog.Logger

	tokenSum [32]byte

	// catMu orders Close and Reload; calls read cat and closed without it.
	catMu  sync.Mutex
	cat    atomic.Pointer[catalog]
	closed atomic.Bool

	reloadMu sync.Mutex

	adm     *admission
	bodies  byteBudget
	metrics *metrics
	tracing *Tracing
	recs    *recordStore // nil: no recordings (Options.Record)

	// A call registers (active +1) before it checks draining, a drain sets
	// draining before it reads active: with sequentially consistent
	// atomics either the drain sees the call and waits for it, or the call
	// sees the drain and leaves: no lock all calls share. drained is
	// signalled when active drops to 0 while draining.
	draining atomic.Bool
	active   atomic.Int64 // open tickets (and, for an instant, refused calls)
	drained  chan struct{}
	// guests tracks guest runs, which can outlive their handler (a call is
	// answered at its deadline while the interrupted guest stops): a drain
	// waits for them too, so their lifecycle events are written before exit.
	guests       sync.WaitGroup
	activeGuests atomic.Int64

	// guestDoneHook, when set (by tests, before serving), runs on the
	// guest worker after the guest's Invoke returned and before its slots
	// are released: it stands for host work that outlives a call's
	// deadline.
	guestDoneHook func()

	// guestWork hands a guest run to an idle guest worker (goGuest).
	guestWork chan *guestRun
	// guestWorkers counts the guest workers alive; guestIdle, when set
	// (tests), replaces the const guestIdle.
	guestWorkers atomic.Int64
	guestIdle    time.Duration

	mux         *http.ServeMux
	patterns    []string // what routes and Handle mounted, in order
	hookMu      sync.Mutex
	reloadHooks []func()
}

var printable = regexp.MustCompile(`^[\x21-\x7e]+$`)

// ValidToken reports whether tok (already trimmed) is acceptable: non-empty
// printable ASCII without spaces.
func ValidToken(tok string) bool { return printable.MatchString(tok) }

// New loads every tool of src into exec (which must outlive the Server) and
// returns a Server ready to answer. A source that cannot be read or any
// tool that cannot be loaded fails New with a *BootError listing every
// problem.
func New(ctx context.Context, exec *executor.Executor, src Source, opts Options) (*Server, error) {
	if !ValidToken(opts.Token) {
		return nil, errors.New("server: the token must be non-empty printable ASCII")
	}
	if opts.MaxConcurrency <= 0 {
		opts.MaxConcurrency = DefaultMaxConcurrency
	}
	switch {
	case opts.QueueSize == 0:
		opts.QueueSize = 4 * opts.MaxConcurrency
	case opts.QueueSize < 0:
		opts.QueueSize = 0
	}
	if opts.PerToolConcurrency <= 0 {
		opts.PerToolConcurrency = max(1, opts.MaxConcurrency*3/4)
	}
	if opts.PerTenantConcurrency <= 0 {
		opts.PerTenantConcurrency = max(1, opts.MaxConcurrency/2)
	}
	switch {
	case opts.PerTenantQueue == 0:
		opts.PerTenantQueue = max(1, opts.QueueSize/4)
	case opts.PerTenantQueue < 0:
		opts.PerTenantQueue = 0
	}
	if opts.PerTenantCPUWindow <= 0 {
		opts.PerTenantCPUWindow = DefaultCPUWindow
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.BodyBudget <= 0 {
		opts.BodyBudget = DefaultBodyBudget
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	recs, err := newRecordStore(opts.Record)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	lg := opts.Log
	if lg == nil {
		// Disabled at every level: a call record is not even formatted.
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		exec: exec, src: src, opts: opts, log: lg, recs: recs,
		tokenSum: sha256.Sum256([]byte(opts.Token)),
		adm:      newAdmission(opts),
		bodies:   byteBudget{limit: opts.BodyBudget},
		metrics:  newMetrics(opts.Version),
		tracing:  opts.Tracing,

		guestWork: make(chan *guestRun),
		drained:   make(chan struct{}, 1),
	}
	s.mux = s.routes()
	cat, problems := loadCatalog(ctx, exec, src, opts.PerToolConcurrency)
	if len(problems) > 0 {
		return nil, &BootError{Problems: problems}
	}
	s.cat.Store(cat)
	return s, nil
}

// NewLogger returns the process-event logger: one JSON object per line on
// w whose "kind" is the event (listening, draining, stopped, call, …).
func NewLogger(w io.Writer) *slog.Logger {
	lw := &lockedWriter{w: w}
	return slog.New(&eventHandler{JSONHandler: slog.NewJSONHandler(lw, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.MessageKey {
				a.Key = "kind"
			}
			return a
		},
	}), w: lw})
}

// Close closes the serving catalog's tools (calls still running on them
// are stopped).
func (s *Server) Close(ctx context.Context) error {
	s.catMu.Lock()
	defer s.catMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	s.closed.Store(true) // before the retire: current sees it once it sees the catalog retired
	s.cat.Load().retire()
	return nil
}

// Reload reads the source again and swaps in the new tools without
// dropping calls: calls running on the old tools finish on them. On any
// problem the old tools keep serving and the error is a *BootError.
func (s *Server) Reload(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	cat, problems := loadCatalog(ctx, s.exec, s.src, s.opts.PerToolConcurrency)
	if len(problems) > 0 && ctx.Err() != nil {
		// Shutdown (or the caller) stopped the reload: not the pack's fault.
		s.log.Info("reload-stopped", "reason", context.Cause(ctx).Error())
		return &BootError{Problems: problems}
	}
	if len(problems) > 0 {
		s.log.Error("reload-failed", "problems", problems)
		return &BootError{Problems: problems}
	}
	s.catMu.Lock()
	if s.closed.Load() {
		s.catMu.Unlock()
		cat.close(ctx)
		return errors.New("server: closed")
	}
	old := s.cat.Swap(cat) // before the retire: current retries with the new one
	s.catMu.Unlock()
	old.retire()
	s.log.Info("reloaded", "packId", cat.packID, "artifactVersion", cat.artifactVersion, "tools", len(cat.order))
	s.reloaded()
	return nil
}

// current returns the serving catalog with a reference held.
// After Close the closed catalog is returned (its tools answer
// internal-error), so a handler never spins.
func (s *Server) current() *catalog {
	for {
		c := s.cat.Load()
		if c.acquire() {
			return c
		}
		if s.closed.Load() {
			c.hold()
			return c
		}
	}
}

// Ready reports whether /readyz answers ready: tools loaded, not draining,
// and (unless EnvCheckWarn) no required env name missing.
func (s *Server) Ready() bool {
	if s.draining.Load() {
		return false
	}
	c := s.current()
	defer c.release()
	return s.opts.EnvCheckWarn || len(c.missingEnv()) == 0
}

func (s *Server) isDraining() bool { return s.draining.Load() }

// routes builds the pack protocol's routes on an http.ServeMux with
// method patterns. Each path also has a method-less pattern that answers
// 405 with Allow (before the token is looked at), and "/" answers 404.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range []struct {
		method, path string
		auth         bool
		fn           http.HandlerFunc
	}{
		{http.MethodPost, "/v1/invoke", true, s.handleInvoke},
		{http.MethodGet, "/v1/info", true, s.handleInfo},
		{http.MethodGet, "/v1/tools", true, s.handleTools},
		{http.MethodGet, "/healthz", false, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}},
		{http.MethodGet, "/readyz", false, s.handleReady},
		{http.MethodGet, "/metrics", false, s.handleMetrics},
	} {
		h := rt.fn
		if rt.auth {
			h = s.requireToken(h)
		}
		mux.Handle(rt.method+" "+rt.path, h) // GET patterns match HEAD too
		s.patterns = append(s.patterns, rt.method+" "+rt.path)
		allow := rt.method
		if allow == http.MethodGet {
			allow = "GET, HEAD"
		}
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", allow)
			transportError(w, http.StatusMethodNotAllowed, "method not allowed")
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		transportError(w, http.StatusNotFound, "no such route")
	})
	return mux
}

// ServeHTTP routes a request. Method is checked first (405), then the token
// (401) on /v1/*; /healthz, /readyz and /metrics need no token. Handlers
// mounted with Handle are routed the same way.
//
// Every request body, on every route, is read through one meter installed
// here, below the handlers (body.go requestBody): charged to the byte
// budget before a byte of it is read, cut at MaxBodyBytes, and held to the
// body deadline (BodyTimeout from now), so that a route mounted later
// cannot forget any of them.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.isDraining() {
		w.Header().Set("Connection", "close")
	}
	rb, r := s.meterBody(w, r, time.Now())
	if rb != nil {
		defer rb.handlerDone()
	}
	s.mux.ServeHTTP(w, r)
}

// Handle mounts h at pattern (http.ServeMux syntax) beside the pack
// protocol's routes, e.g. the MCP endpoint. h does its own
// authentication (see CheckToken); its request bodies are metered like
// every route's (see ServeHTTP and ReadBody). Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

func (s *Server) requireToken(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			transportError(w, http.StatusUnauthorized, "missing or wrong "+HeaderToken)
			return
		}
		h(w, r)
	}
}

// CheckToken reports whether tok is the service token, comparing in
// constant time (over digests, so the length does not leak either).
func (s *Server) CheckToken(tok string) bool {
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1
}

// authorized reports whether r carries exactly one, right, token header.
func (s *Server) authorized(r *http.Request) bool {
	vals := r.Header[requestKeys.token]
	if len(vals) != 1 {
		return false
	}
	return s.CheckToken(vals[0])
}

// transportError answers a non-2xx transport status. Its body is a short
// text reason, never a pack-protocol message (those are 200 only).
func transportError(w http.ResponseWriter, status int, reason string) {
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, reason+"\n")
}

// HeaderRefusal names, on a 503 answered before a call ran, why it was
// refused (a Refusal: over-capacity, tenant-queue-full, …).
const HeaderRefusal = "sandboxd-refusal"

// refuse answers the 503 of a refusal: Retry-After is retry rounded up to
// whole seconds (at least 1), and sandboxd-refusal names the reason.
func refuse(w http.ResponseWriter, r Refusal, toolID string, retry time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(retry), 10))
	w.Header().Set(HeaderRefusal, string(r))
	transportError(w, http.StatusServiceUnavailable, r.Reason(toolID))
}

// RetryAfterSeconds is a refusal's retry delay in whole seconds, rounded
// up, at least 1 (a zero delay means the default, 1 s).
func RetryAfterSeconds(retry time.Duration) int64 {
	return max(1, int64((retry+time.Second-1)/time.Second))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		transportError(w, http.StatusInternalServerError, "cannot encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	switch {
	case s.isDraining():
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
	case !s.Ready():
		c := s.current()
		missing := c.missingEnv()
		c.release()
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not-ready", "missingEnv": missing})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// info is the closed /v1/info shape.
type info struct {
	Protocol        int        `json:"protocol"`
	PackID          string     `json:"packId"`
	PackVersion     string     `json:"packVersion"`
	ArtifactVersion string     `json:"artifactVersion"`
	Tools           []infoTool `json:"tools"`
	Checks          []string   `json:"checks"`
	// MissingEnv is present when the index declares env (empty when
	// nothing is missing).
	MissingEnv *[]string `json:"missingEnv,omitempty"`
}

type infoTool struct {
	ID      string `json:"id"`
	Version string `json:"version,omitempty"`
}

func (s *Server) handleInfo(w http.ResponseWriter, _ *http.Request) {
	c := s.current()
	defer c.release()
	in := info{Protocol: ProtocolVersion, PackID: c.packID, PackVersion: c.packVersion, ArtifactVersion: c.artifactVersion,
		Tools: []infoTool{}, Checks: []string{}}
	if c.hasEnv {
		missing := c.missingEnv()
		if missing == nil {
			missing = []string{}
		}
		in.MissingEnv = &missing
	}
	for _, id := range c.order {
		in.Tools = append(in.Tools, infoTool{ID: id, Version: c.tools[id].version})
	}
	in.Checks = append(in.Checks, c.checkOrder...)
	writeJSON(w, http.StatusOK, in)
}

// ToolInfo is one entry of GET /v1/tools: what /v1/info's closed shape
// cannot carry.
type ToolInfo struct {
	ID          string          `json:"id"`
	Version     string          `json:"version,omitempty"`
	Description string          `json:"description"`
	Posture     string          `json:"posture"`
	Style       string          `json:"style"`
	Digest      string          `json:"digest"`
	Limits      ToolLimits      `json:"limits"`
	Mutating    bool            `json:"mutating"`
	Network     any             `json:"network,omitempty"`
	Input       json.RawMessage `json:"input"`
	Output      json.RawMessage `json:"output"`
}

// ToolLimits are a tool's effective limits.
type ToolLimits struct {
	MemMB int64 `json:"memMB"`
	CPUMs int64 `json:"cpuMs"`
}

func (s *Server) handleTools(w http.ResponseWriter, _ *http.Request) {
	c := s.current()
	defer c.release()
	out := struct {
		PackID          string     `json:"packId"`
		PackVersion     string     `json:"packVersion"`
		ArtifactVersion string     `json:"artifactVersion"`
		Tools           []ToolInfo `json:"tools"`
	}{c.packID, c.packVersion, c.artifactVersion, []ToolInfo{}}
	for _, id := range c.order {
		e := c.tools[id]
		m := e.tool.Manifest()
		mem, cpu := e.tool.Limits()
		ti := ToolInfo{ID: id, Version: e.version, Description: m.Description, Posture: string(e.tool.Posture()),
			Style: string(e.tool.Style()), Digest: e.tool.Digest(), Limits: ToolLimits{mem, cpu},
			Mutating: m.IsMutating(), Input: m.Input, Output: m.Output}
		if m.Network != nil {
			ti.Network = m.Network
		}
		out.Tools = append(out.Tools, ti)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	c := s.current()
	inflight, queued, tenants := s.adm.stats()
	waiting, longest := s.adm.queueStats()
	g := gauges{
		inflight: inflight, queued: queued, capacity: s.adm.capacity, queueCap: s.adm.queueCap,
		tenants: tenants, tenantCap: s.adm.perTenant, tenantQueueCap: s.adm.tenantQueue,
		tenantsWaiting: waiting, longestTenantQueue: longest,
		draining: s.isDraining(), tools: len(c.order), toolInflight: map[string]int{},
	}
	g.poolReady, g.poolCap, g.poolRecycled, g.imageInstances = map[string]int{}, map[string]int{}, map[string]int64{}, map[string]int64{}
	for id, e := range c.tools {
		g.toolInflight[id] = s.adm.toolInflight(&e.slots)
		st := e.tool.Stats()
		if st.ImageInstances > 0 {
			g.imageInstances[id] = st.ImageInstances
		}
		if st.PoolTarget > 0 {
			g.poolReady[id], g.poolCap[id] = st.PoolReady, st.PoolTarget
			g.poolRecycled[id] = st.RecycledCalls
		}
	}
	c.release()
	g.ready = s.Ready()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(w, g)
}

// parseTimeout reads kindgi-timeout-ms: a positive integer of
// milliseconds; absent or invalid means DefaultTimeout. src names it for
// the deadline-exceeded message.
func parseTimeout(h string) (d time.Duration, src executor.TimeoutSource) {
	if h == "" {
		return DefaultTimeout, executor.TimeoutSource{}
	}
	n, err := strconv.ParseInt(h, 10, 64)
	if err != nil || n <= 0 {
		return DefaultTimeout, executor.TimeoutSource{}
	}
	src = executor.TimeoutSource{Name: HeaderTimeout, Requested: n}
	if n > int64(MaxTimeout/time.Millisecond) {
		return MaxTimeout, src
	}
	return time.Duration(n) * time.Millisecond, src
}

var traceparentRE = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$`)

// ParseTraceparent returns the trace and parent span ids of a W3C
// traceparent value (header or MCP _meta), or "" for an invalid one.
func ParseTraceparent(h string) (traceID, spanID string) {
	if h == "" { // the common case: no trace context, no regexp run
		return "", ""
	}
	m := traceparentRE.FindStringSubmatch(h)
	if m == nil || m[1] == "ff" || (m[1] == "00" && m[5] != "") ||
		m[2] == "00000000000000000000000000000000" || m[3] == "0000000000000000" {
		return "", ""
	}
	return m[2], m[3]
}

// callRecord is what one invocation's "call" event carries.
type callRecord struct {
	id, target, outcome, code, callID string
	recording                         string // the file of the call's recording (Options.Record)
	start                             time.Time
	cc                                executor.CallContext
	traceID, spanID                   string
}

func (s *Server) record(rec *callRecord) {
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	// slog.Attr values, not ...any: the same event without boxing each
	// value (the array holds the most attributes a record has).
	var buf [12]slog.Attr
	attrs := append(buf[:0], slog.String("id", clipID(rec.id)), slog.String("target", rec.target), slog.String("outcome", rec.outcome),
		slog.Int64("durationMs", time.Since(rec.start).Milliseconds()), slog.String("tenantId", clipID(rec.cc.TenantID)), slog.String("runId", clipID(rec.cc.RunID)))
	if rec.cc.RequestID != "" {
		attrs = append(attrs, slog.String("requestId", clipID(rec.cc.RequestID)))
	}
	if rec.traceID != "" {
		attrs = append(attrs, slog.String("traceId", rec.traceID), slog.String("spanId", rec.spanID))
	}
	if rec.callID != "" {
		attrs = append(attrs, slog.String("callId", rec.callID))
	}
	if rec.code != "" {
		attrs = append(attrs, slog.String("code", rec.code))
	}
	if rec.recording != "" {
		attrs = append(attrs, slog.String("recording", rec.recording))
	}
	// NewLogger's handler writes the record directly (eventlog.go): slog's
	// JSONHandler was 7% of the served path's CPU under wrk (bench-serve
	// -cpuprofile).
	if h, ok := s.log.Handler().(*eventHandler); ok && h.writeCall(time.Now(), attrs) {
		return
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "call", attrs...)
}

// requestKeys are the canonical forms of the request headers every call
// reads. net/http's server canonicalises the names it receives, so a
// value is found by its canonical key as Header.Get finds it; Get
// canonicalises its argument on every call instead, which allocates a
// string for any name that is not one of textproto's common headers
// (four per /v1/invoke: token, timeout, traceparent, request id).
var requestKeys = struct{ token, timeout, runID, requestID, traceparent string }{
	http.CanonicalHeaderKey(HeaderToken), http.CanonicalHeaderKey(HeaderTimeout), http.CanonicalHeaderKey(HeaderRunID),
	http.CanonicalHeaderKey(HeaderRequestID), http.CanonicalHeaderKey(HeaderTraceparent),
}

// headerValue is h.Get for a key already canonical: the first value, or "".
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// answerKeys are the canonical forms of the headers every 200 answer sets.
var answerKeys = struct{ contentType, contentLength, duration, artifact, usage, callID string }{
	http.CanonicalHeaderKey("Content-Type"), http.CanonicalHeaderKey("Content-Length"), http.CanonicalHeaderKey(HeaderDuration),
	http.CanonicalHeaderKey(HeaderArtifact), http.CanonicalHeaderKey(HeaderUsage), http.CanonicalHeaderKey(HeaderCallID),
}

// jsonContentType is the Content-Type value of every 200 answer (shared:
// net/http only reads header values).
var jsonContentType = []string{"application/json"}

// answer writes a 200 pack-protocol response with the headers every 200
// answer carries.
func (s *Server) answer(w http.ResponseWriter, artifactVersion string, start time.Time, msg any, usage *executor.Usage, callID string) {
	// b is the body, or, for a result, head, out and tail are: the
	// output is validated JSON, written as it is, neither re-encoded
	// (json.Marshal would copy a big output twice more, outside memMB)
	// nor copied into one buffer with the frame around it (a copy and an
	// allocation of the output's size per call: the response's buffer
	// joins the three writes).
	var b, head, out, tail []byte
	var err error
	if r, ok := msg.(wireResult); ok {
		head, out, tail = r.jsonParts()
	} else if b, err = json.Marshal(msg); err == nil {
		b = append(b, '\n')
	}
	if err != nil {
		s.internal(w, artifactVersion, fmt.Errorf("cannot encode the answer: %w", err))
		return
	}
	// The keys are canonical already (answerKeys): set directly, as
	// Header.Set would, without canonicalising them on every answer.
	h := w.Header()
	h[answerKeys.contentType] = jsonContentType
	// The values share one backing array (one allocation, not one per
	// header); each is a full slice of length 1, so an append by anyone
	// copies instead of writing into its neighbour.
	vals := make([]string, 5)
	set := func(i int, key, v string) {
		vals[i] = v
		h[key] = vals[i : i+1 : i+1]
	}
	// A declared length lets net/http send the headers and the body in one
	// write when the handler flushes (handleInvoke does, before its ticket
	// closes): without it, a flush before the handler returns switches the
	// response to chunked encoding and the terminating chunk takes a
	// second write syscall.
	set(0, answerKeys.contentLength, strconv.Itoa(len(b)+len(head)+len(out)+len(tail)))
	set(1, answerKeys.duration, strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	set(2, answerKeys.artifact, artifactVersion)
	if usage != nil {
		set(3, answerKeys.usage, usageHeader(usage))
	}
	if callID != "" {
		set(4, answerKeys.callID, callID)
	}
	w.WriteHeader(http.StatusOK)
	if b == nil {
		_, _ = w.Write(head)
		_, _ = w.Write(out)
		_, _ = w.Write(tail)
		return
	}
	_, _ = w.Write(b)
}

// internal answers 500: the service itself failed.
func (s *Server) internal(w http.ResponseWriter, artifactVersion string, err error) {
	s.log.Error("internal-error", "error", err.Error())
	if artifactVersion != "" {
		w.Header().Set(HeaderArtifact, artifactVersion)
	}
	transportError(w, http.StatusInternalServerError, "internal error")
}

// handleInvoke is the pack protocol's adapter to the core: it reads and
// parses the frame within the body budget and deadlines, hands the call to
// the core (Ticket.Call) and renders the Outcome.
func (s *Server) handleInvoke(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	timeout, timeoutSrc := parseTimeout(headerValue(r.Header, requestKeys.timeout))
	deadline := start.Add(timeout)

	// The ticket is held until the answer is written, so a drain waits for
	// the answer too.
	var ticket Ticket
	if refused := s.admit(&ticket); refused != "" {
		refuse(w, refused, "", 0)
		return
	}
	// The answer is flushed before the ticket closes: once a drain has
	// seen every ticket closed, every answer is on the wire. The
	// controller is the body's when there is one (no second allocation).
	br := bodyOf(r) // nil only for a request without a body
	var rc *http.ResponseController
	if br != nil {
		rc = &br.rc
	} else {
		rc = http.NewResponseController(w)
	}
	defer func() {
		_ = rc.Flush()
		ticket.Close()
	}()
	ct := headerValue(r.Header, answerKeys.contentType)
	mt, err := "application/json", error(nil)
	if ct != mt { // the common case needs no parse
		mt, _, err = mime.ParseMediaType(ct)
	}
	if err != nil || mt != "application/json" {
		transportError(w, http.StatusUnsupportedMediaType, "the body must be application/json")
		return
	}
	if r.ContentLength > MaxBodyBytes {
		refuseTooLarge(w, r)
		return
	}
	// ServeHTTP metered the body (body.go): it is charged to the byte
	// budget before it is read, and the charge is held while the call
	// lasts (the guest's run included, which may outlive this handler):
	// memory for bodies in flight never passes the budget, however many
	// connections send them.
	// The body must arrive by its own deadline (BodyTimeout, set by
	// ServeHTTP), or the call's when that is earlier: a trickling client
	// cannot hold an accepted call and its budget for long. It is lifted
	// once the body is in, so that a disconnect can still be noticed.
	var body []byte
	bodyBy, byCall := deadline, true
	if br != nil {
		br.until(deadline)
		bodyBy, byCall = br.deadline, br.byCall
		body, err = br.readAll(bodyCharge, MaxBodyBytes)
		// Lifted once the body is in (requestBody.Read does at io.EOF,
		// here when the body was read whole without one; lifting it again
		// is a poller call and a timer delete per call); on failure it
		// stays, so that net/http's discard of what is left cannot wait on
		// the client.
		if err == nil && !br.eof {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}
	if err != nil {
		// The rest of the body will not be read: close the connection
		// after the answer instead of waiting to drain it.
		w.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, ErrBodyBudget):
			transportError(w, http.StatusServiceUnavailable, "over capacity: request bodies in flight are at the byte budget")
		case errors.Is(err, errTooLarge) || errors.As(err, &mbe):
			refuseTooLarge(w, r)
		case byCall && (errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline)):
			s.answer(w, s.artifactVersion(), start, protoErr(WireDeadlineExceeded, "%s while the request body was still arriving", executor.DeadlineMessage(timeout, timeoutSrc)), nil, "")
		case errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(bodyBy):
			s.answer(w, s.artifactVersion(), start, protoErr(WireDeadlineExceeded, "the request body did not arrive within %d ms (the body deadline)", s.opts.BodyTimeout.Milliseconds()), nil, "")
		default:
			// The client went away mid-body: nothing ran, nobody to answer.
		}
		return
	}
	traceID, spanID := ParseTraceparent(headerValue(r.Header, requestKeys.traceparent))
	inv, werr := parseFrame(body)
	if werr != nil {
		s.answer(w, s.artifactVersion(), start, werr, nil, "")
		return
	}
	if inv.ctx.RunID == "" {
		inv.ctx.RunID = headerValue(r.Header, requestKeys.runID)
	}
	if inv.ctx.RequestID == "" {
		inv.ctx.RequestID = headerValue(r.Header, requestKeys.requestID)
	}
	body = nil // parsed: what the call needs lives in inv
	var releaseBody releaser
	if br != nil {
		releaseBody = br.keep() // the core releases it when the call is over
	}
	o := ticket.Call(r.Context(), Call{
		Tool: inv.toolID, Version: inv.toolVersion, HasVersion: inv.hasVersion,
		Input: inv.input, Context: inv.ctx, Start: start, Deadline: deadline, TimeoutSource: timeoutSrc,
		TraceID: traceID, SpanID: spanID, release: releaseBody,
		Check: inv.check, Config: inv.config, Trace: inv.trace,
	})
	switch {
	case o.Refused != "":
		refuse(w, o.Refused, inv.toolID, o.RetryAfter)
	case o.Gone:
		// The caller went away while queued: nobody to answer.
	case o.Err == nil && inv.check:
		s.answer(w, o.ArtifactVersion, start, wireCheckResult{V: ProtocolVersion, Kind: "check-result", Result: o.Output}, o.Usage, o.CallID)
	case o.Err == nil:
		s.answer(w, o.ArtifactVersion, start, wireResult{V: ProtocolVersion, Kind: "result", Output: o.Output}, o.Usage, o.CallID)
	default:
		we, ok := toWire(o.Err)
		if !ok {
			s.internal(w, o.ArtifactVersion, o.Err)
			return
		}
		if inv.check { // a check's error names it by checkId
			we.CheckID, we.ToolID = we.ToolID, ""
			if we.Code == WireToolNotInPack {
				we.Code = WireCheckNotInPack
			}
		}
		s.answer(w, o.ArtifactVersion, start, we, o.Usage, o.CallID)
	}
}

// artifactVersion is the serving catalog's artifact version.
func (s *Server) artifactVersion() string {
	c := s.current()
	defer c.release()
	return c.artifactVersion
}

func usageCPU(u *executor.Usage) float64 {
	if u == nil {
		return 0
	}
	return u.CPUMs
}

func usagePeak(u *executor.Usage) float64 {
	if u == nil {
		return 0
	}
	return u.PeakMemMB
}
