// Package mcp owns sandboxd's Model Context Protocol server: the second
// transport adapter of the server core (package server), over stdio and
// Streamable HTTP, built on github.com/modelcontextprotocol/go-sdk. The
// mapping from Kindgi manifests and call outcomes to MCP is in mapping.go
// and documented in docs/mcp.md.
package mcp
