package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/suggest"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// Version is the implementation version announced to clients
	// (serverInfo.version; default "dev").
	Version string
	// Log receives process events (mcp-tools-refused, mcp-http-refused);
	// nil discards them.
	Log *slog.Logger
	// TenantID is the call context's tenantId for MCP calls that name no
	// tenant (default "mcp"); MCP has no call context of its own.
	TenantID string
	// TenantHeader is the HTTP request header whose value is the call's
	// tenantId over Streamable HTTP (default DefaultTenantHeader): the
	// tenant admission queues and limits the call under. Every holder of
	// the bearer token (the pack token) is equally trusted, so the tenant
	// is declared by the caller, as ctx.tenantId is in the pack protocol;
	// an authenticating proxy in front sets it. A value that is not
	// 1-256 bytes of printable ASCII is refused (-32602).
	TenantHeader string
}

// DefaultTenantHeader is the request header naming an MCP call's tenant.
const DefaultTenantHeader = "Sandboxd-Tenant"

// maxTenantBytes bounds a tenant id taken from a header.
const maxTenantBytes = 256

// Server is sandboxd's MCP server: it lists the core's catalog as MCP
// tools and runs tools/call through the core (server.Server.Admit and
// Ticket.Call), so MCP calls share admission, drain, metrics, call
// records and lifecycle events with every other transport. Create it with
// New; serve it with ServeStdio or Handler. Safe for concurrent use.
type Server struct {
	core  *server.Server
	sdk   *sdk.Server
	opts  Options
	log   *slog.Logger
	runID string

	mu    sync.Mutex
	names map[string]bool // tools registered with the SDK
}

// New maps every tool of core's catalog (see ToolFor). A tool that cannot
// be an MCP tool fails New with a *server.BootError naming it and why.
// On every later reload of core, the MCP tool list follows the catalog
// (clients get notifications/tools/list_changed); a reloaded tool that
// cannot be mapped is left out and logged as mcp-tools-refused.
func New(core *server.Server, opts Options) (*Server, error) {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.TenantID == "" {
		opts.TenantID = "mcp"
	}
	if opts.TenantHeader == "" {
		opts.TenantHeader = DefaultTenantHeader
	}
	lg := opts.Log
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Server{core: core, opts: opts, log: lg, runID: "mcp-" + hex.EncodeToString(b[:]), names: map[string]bool{}}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "sandboxd", Version: opts.Version}, &sdk.ServerOptions{
		// No logging capability: logs go to the process event stream.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	s.sdk.AddReceivingMiddleware(s.knownTools)
	if problems := s.sync(); len(problems) > 0 {
		return nil, &server.BootError{Problems: problems}
	}
	core.OnReload(func() {
		if problems := s.sync(); len(problems) > 0 {
			s.log.Warn("mcp-tools-refused", "problems", problems)
		}
	})
	return s, nil
}

// SDK returns the underlying go-sdk server (to connect other transports,
// e.g. the SDK's in-memory transport in tests).
func (s *Server) SDK() *sdk.Server { return s.sdk }

// sync makes the SDK's tool set the catalog's mappable tools.
func (s *Server) sync() []server.Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	var problems []server.Problem
	want := map[string]bool{}
	for _, ct := range s.core.Tools() {
		t, err := ToolFor(ct)
		if err == nil {
			err = s.add(t)
		}
		if err != nil {
			problems = append(problems, server.Problem{Tool: ct.ID, Message: "not servable over MCP: " + err.Error()})
			continue
		}
		want[ct.ID] = true
	}
	var gone []string
	for n := range s.names {
		if !want[n] {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		s.sdk.RemoveTools(gone...)
	}
	s.names = want
	return problems
}

// knownTools answers a tools/call that names a tool the server does not
// list before the SDK does, with the SDK's code (-32602) and words that
// say what to change: the nearest listed name, as tool-not-in-pack gives
// it on /v1/invoke, and where the names are (unknownTool).
func (s *Server) knownTools(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if r, ok := req.(*sdk.CallToolRequest); ok && method == "tools/call" && r.Params != nil {
			s.mu.Lock()
			known := s.names[r.Params.Name]
			s.mu.Unlock()
			if !known {
				return nil, s.unknownTool(r.Params.Name)
			}
		}
		return next(ctx, method, req)
	}
}

// unknownTool is the answer to a call of a tool the server does not list:
//
//	unknown tool "acme.ecko" (did you mean "acme.echo"?); tools/list lists the tools
func (s *Server) unknownTool(name string) *jsonrpc.Error {
	s.mu.Lock()
	names := make([]string, 0, len(s.names))
	for n := range s.names {
		if n != name { // a tool a reload took from the core, not yet from the list
			names = append(names, n)
		}
	}
	s.mu.Unlock()
	msg := fmt.Sprintf("unknown tool %q", clip(name))
	if n := suggest.Nearest(name, names); n != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", n)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg + "; tools/list lists the tools"}
}

// add registers t, turning an SDK panic (a schema it cannot take) into an
// error.
func (s *Server) add(t *sdk.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	s.sdk.AddTool(t, s.callTool)
	return nil
}

// callTool is the tools/call adapter: arguments, _meta (progressToken,
// traceparent, MetaTimeoutMs) and cancellation in, the Outcome mapped out
// (resultFor).
func (s *Server) callTool(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	start := time.Now()
	p := req.Params
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	} else if !isObject(args) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call arguments must be an object"}
	}
	timeout, timeoutSrc := server.DefaultTimeout, executor.TimeoutSource{}
	meta := p.GetMeta()
	if v, ok := meta[MetaTimeoutMs]; ok {
		ms, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		if err != nil || ms <= 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "_meta[\"" + MetaTimeoutMs + "\"] must be a positive integer"}
		}
		timeout = min(time.Duration(ms)*time.Millisecond, server.MaxTimeout)
		timeoutSrc = executor.TimeoutSource{Name: metaTimeoutSource, Requested: ms}
	}
	tenant := s.opts.TenantID
	tp, _ := meta["traceparent"].(string)
	if req.Extra != nil && req.Extra.Header != nil {
		if tp == "" {
			tp = req.Extra.Header.Get(server.HeaderTraceparent)
		}
		if vals := req.Extra.Header.Values(s.opts.TenantHeader); len(vals) > 0 {
			if len(vals) != 1 || len(vals[0]) > maxTenantBytes || !server.ValidToken(vals[0]) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the " + s.opts.TenantHeader + " header must be one value of 1-256 printable ASCII characters"}
			}
			tenant = vals[0]
		}
	}
	traceID, spanID := server.ParseTraceparent(tp)
	c := server.Call{
		Tool: p.Name, Input: args, Start: start, Deadline: start.Add(timeout), TimeoutSource: timeoutSrc,
		Context: executor.CallContext{TenantID: tenant, RunID: s.runID},
		TraceID: traceID, SpanID: spanID,
	}
	if sid := req.Session.ID(); sid != "" {
		c.Context.RunID = "mcp-" + sid
	}
	tok := p.GetProgressToken()
	progress := func(n float64, msg string) {
		if tok != nil {
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: n, Total: 2, Message: msg})
		}
	}
	c.Running = func(callID string) { progress(1, "running "+callID) }
	o := s.core.Call(ctx, c)
	if o.Gone {
		// Cancelled while it waited for a slot: answered like a call
		// cancelled while it ran (isError, cancelled), never with the
		// context's error (code 0 on the wire). Over HTTP nobody reads it.
		return resultFor(&o, p.Name)
	}
	if o.Err != nil && o.Err.Code == toolerr.ToolNotInPack { // a reload took it between the list and the call
		return nil, s.unknownTool(p.Name)
	}
	res, err := resultFor(&o, p.Name)
	if err == nil {
		msg := "completed"
		if res.IsError {
			msg = "failed: " + string(o.Err.Code)
		}
		progress(2, msg)
	}
	return res, err
}
