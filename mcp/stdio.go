package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
)

// ServeStdio serves one MCP session on in/out (newline-delimited JSON-RPC;
// out carries protocol only) until in is closed or ctx is done. When ctx
// is done it drains first: new calls are refused (CodeUnavailable) while
// the calls in flight finish and are answered, for up to the core's drain
// timeout; then the session closes. It returns nil on a closed input or a
// drain, the session's error otherwise.
//
// A line that is not a JSON-RPC message (invalid JSON, a wrong version
// tag, an empty batch, a line over server.MaxBodyBytes) is answered with
// a JSON-RPC error (-32700 or -32600, id null unless it could be read) and
// skipped: the go-sdk would end the session on it.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go filterLines(in, pw, w, server.MaxBodyBytes)
	t := &sdk.IOTransport{Reader: pr, Writer: w, MaxLineLength: server.MaxBodyBytes + 1}
	ss, err := s.sdk.Connect(sctx, t, nil)
	if err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err := <-ended:
		// stdin closed: calls still running have nobody to answer.
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || err.Error() == "EOF" {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	abandoned := s.core.Drain()
	s.log.Info("stopped", "abandoned", abandoned, "transport", "stdio")
	_ = ss.Close()
	_ = pr.Close()
	<-ended
	return nil
}

// filterLines copies the JSON-RPC messages of in to pw, one per line, and
// answers every other line on w. It closes pw when in ends.
func filterLines(in io.Reader, pw *io.PipeWriter, w io.Writer, maxLine int) {
	br := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	over := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 && !over {
			if len(line)+len(chunk) > maxLine {
				over, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			if err == nil || len(chunk) > 0 {
				rpcError(w, nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("a message over %d bytes", maxLine))
			}
			over = false
		} else if msg := bytes.TrimSpace(line); len(msg) > 0 {
			if code, id, reason := checkMessage(msg); code != 0 {
				rpcError(w, id, code, reason)
			} else if _, werr := pw.Write(append(msg, '\n')); werr != nil {
				return
			}
		}
		line = line[:0]
		if err != nil {
			_ = pw.CloseWithError(io.EOF)
			return
		}
	}
}

// checkMessage returns 0, or the error code, the request id (when it could
// be read) and the reason a line is not a message the SDK accepts.
func checkMessage(b []byte) (code int64, id any, reason string) {
	if !json.Valid(b) {
		return jsonrpc.CodeParseError, nil, "parse error: not JSON"
	}
	msgs := []json.RawMessage{b}
	if b[0] == '[' {
		if err := json.Unmarshal(b, &msgs); err != nil || len(msgs) == 0 {
			return jsonrpc.CodeInvalidRequest, nil, "invalid request: an empty or malformed batch"
		}
	}
	for _, m := range msgs {
		if _, err := jsonrpc.DecodeMessage(m); err != nil {
			var head struct {
				ID any `json:"id"`
			}
			_ = json.Unmarshal(m, &head)
			return jsonrpc.CodeInvalidRequest, head.ID, "invalid request: " + err.Error()
		}
	}
	return 0, nil, ""
}

func rpcError(w io.Writer, id any, code int64, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	_, _ = w.Write(append(b, '\n'))
}

// lockedWriter serialises whole-message writes of the SDK and of
// filterLines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
