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
	"sync/atomic"
	"time"

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
	var unanswered atomic.Int64 // calls read from stdin minus answers the SDK wrote
	// At the end of stdin the calls already read are answered before the
	// session closes, for up to the drain timeout (printf … | sandboxd mcp).
	go func() {
		filterLines(in, pw, w, server.MaxBodyBytes, &unanswered)
		for end := time.Now().Add(s.core.DrainTimeout()); unanswered.Load() > 0 && time.Now().Before(end) && sctx.Err() == nil; {
			time.Sleep(time.Millisecond)
		}
		_ = pw.CloseWithError(io.EOF)
	}()
	t := &sdk.IOTransport{Reader: pr, Writer: answerCounter{w, &unanswered}, MaxLineLength: server.MaxBodyBytes + 1}
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
	// The core has its outcomes; the SDK writes their answers after the
	// handlers return. Wait for those writes (briefly) before closing.
	for end := time.Now().Add(answerGrace); unanswered.Load() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	s.log.Info("stopped", "abandoned", abandoned, "transport", "stdio")
	_ = ss.Close()
	_ = pr.Close()
	<-ended
	return nil
}

// filterLines copies the JSON-RPC messages of in to pw, one per line, and
// answers every other line on w, until in ends (the caller closes pw).
func filterLines(in io.Reader, pw *io.PipeWriter, w io.Writer, maxLine int, calls *atomic.Int64) {
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
			} else {
				calls.Add(countCalls(msg))
				if _, werr := pw.Write(append(msg, '\n')); werr != nil {
					return
				}
			}
		}
		line = line[:0]
		if err != nil {
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

// answerGrace bounds how long a drained stdio session waits for the SDK
// to write the answers of calls the core has finished.
const answerGrace = 2 * time.Second

// countCalls is the number of calls (requests with an id) in a message
// checkMessage accepted.
func countCalls(b []byte) int64 {
	msgs := []json.RawMessage{b}
	if b[0] == '[' {
		_ = json.Unmarshal(b, &msgs)
	}
	var n int64
	for _, m := range msgs {
		if req, ok := decodeRequest(m); ok && req.IsCall() {
			n++
		}
	}
	return n
}

func decodeRequest(b []byte) (*jsonrpc.Request, bool) {
	m, err := jsonrpc.DecodeMessage(b)
	if err != nil {
		return nil, false
	}
	req, ok := m.(*jsonrpc.Request)
	return req, ok
}

// answerCounter is the SDK's writer: it counts the answers (responses) it
// writes against the calls filterLines counted in.
type answerCounter struct {
	w *lockedWriter
	n *atomic.Int64
}

func (a answerCounter) Write(p []byte) (int, error) {
	out := p
	for line := range bytes.SplitSeq(p, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if m, derr := jsonrpc.DecodeMessage(line); derr == nil {
			if r, ok := m.(*jsonrpc.Response); ok {
				a.n.Add(-1)
				if b, ok := withoutCodeZero(r); ok {
					out = bytes.Replace(out, line, b, 1)
				}
			}
		}
	}
	if _, err := a.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (a answerCounter) Close() error { return a.w.Close() }

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
