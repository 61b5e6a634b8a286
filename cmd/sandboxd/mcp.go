package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

func init() {
	commands["mcp"] = command{"serve tools over MCP on stdin/stdout (for MCP clients that spawn their servers)", cmdMCP}
}

// cmdMCP serves one MCP session over stdio: stdout carries only the
// protocol; process events, guest output (stdout and stderr) and
// --events - go to stderr. It exits 0 when stdin closes, and on SIGTERM
// after draining (calls in flight are answered for up to --drain-timeout).
// SIGHUP reloads the tools (clients get notifications/tools/list_changed).
// The tool sources and executor flags are serve's.
func cmdMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf serviceFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandboxd mcp (--index index.json|oci://REF [--module-root DIR] | --tools DIR) [flags]\n\n"+
			"Serves the tools as MCP tools on stdin/stdout (newline-delimited JSON-RPC; protocol\n"+
			"revisions 2025-11-25 and older with initialize, and 2026-07-28). Process events and\n"+
			"guest output are JSON lines on stderr. Exits 0 when stdin closes; SIGTERM drains;\n"+
			"SIGHUP reloads the tools. See docs/mcp.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	plog := server.NewLogger(stderr)
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if fs.NArg() > 0 {
		bad("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	mc := sf.check(bad)
	if len(problems) > 0 {
		plog.Error("config-invalid", "problems", problems)
		return exitError
	}
	// stdio has no token: the core gets a random one nobody knows (it
	// serves no HTTP here).
	var b [16]byte
	_, _ = rand.Read(b[:])
	svc, code, ok := sf.boot(ctx, plog, hex.EncodeToString(b[:]), mc, stderr, stderr)
	if !ok {
		return code
	}
	defer svc.close()
	ms, ok := svc.mcp(plog, "")
	if !ok {
		return exitError
	}
	defer svc.reloadOnHUP(ctx)()
	plog.Info("listening", "transport", "stdio", "tools", len(svc.srv.Tools()))
	if err := ms.ServeStdio(ctx, stdin, stdout); err != nil {
		plog.Error("stopped", "error", err.Error())
		return exitError
	}
	return exitOK
}

// implVersion is the version MCP clients see in serverInfo.
func implVersion() string {
	bi, ok := debug.ReadBuildInfo()
	return buildVersion(stampedVersion, bi, ok)
}

// mcp maps the service's tools to MCP (boot-failed on a tool MCP cannot
// take); tenantHeader names the HTTP header of a call's tenant ("" for the
// default).
func (svc *service) mcp(plog *slog.Logger, tenantHeader string) (*mcp.Server, bool) {
	ms, err := mcp.New(svc.srv, mcp.Options{Version: implVersion(), Log: plog, TenantHeader: tenantHeader})
	if err != nil {
		var be *server.BootError
		if errors.As(err, &be) {
			plog.Error("boot-failed", "problems", be.Problems)
		} else {
			plog.Error("boot-failed", "problems", []server.Problem{{Message: err.Error()}})
		}
		return nil, false
	}
	return ms, true
}
