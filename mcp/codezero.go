package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The go-sdk answers a few requests with a plain Go error, which its
// JSON-RPC layer writes with code 0: a call before initialize on stdio,
// initialize with params that are not an object, a second initialize, a
// request cancelled before it ran.
// Some of these are decided before any middleware runs, so sandboxd fixes
// the answers on their way out, on both transports (answerCounter on
// stdio, codeZeroWriter on Streamable HTTP): no answer has code 0.

// withoutCodeZero re-encodes a response whose error has JSON-RPC code 0
// with the code it should have and words that say what to change (see
// properError); ok is false for any other response.
func withoutCodeZero(r *jsonrpc.Response) ([]byte, bool) {
	var we *jsonrpc.Error
	if r.Error == nil || !errors.As(r.Error, &we) || we.Code != 0 {
		return nil, false
	}
	code, msg := properError(we.Message)
	b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: r.ID, Error: &jsonrpc.Error{Code: code, Message: msg, Data: we.Data}})
	return b, err == nil
}

// codeRequestCancelled answers a request the client cancelled
// (notifications/cancelled) before the SDK handed it to a handler: the
// SDK answers it with the context's error. The client ignores the answer
// (MCP: a cancelled request's response is discarded); -32800 is the
// JSON-RPC code LSP gives a cancelled request.
const codeRequestCancelled = -32800

// properError is the JSON-RPC code and message for the text of an SDK
// error that had none: -32602 (with what initialize takes) for params it
// could not read, -32800 for a request cancelled before it ran, -32600
// for anything else (the SDK's other plain errors are all about the
// request: a call before initialize, a second initialize).
func properError(msg string) (int64, string) {
	switch {
	case msg == context.Canceled.Error():
		return codeRequestCancelled, "request cancelled (notifications/cancelled) before it ran"
	case strings.Contains(msg, "during session initialization"):
		return jsonrpc.CodeInvalidRequest, msg + ": send initialize (and notifications/initialized) first"
	case strings.HasPrefix(msg, "handling 'initialize': "):
		return jsonrpc.CodeInvalidParams, msg + ": initialize params must be an object with protocolVersion, capabilities and clientInfo"
	case strings.Contains(msg, "unmarshaling"), strings.Contains(msg, `missing required "params"`):
		return jsonrpc.CodeInvalidParams, msg
	}
	return jsonrpc.CodeInvalidRequest, msg
}

// codeZero is how an error with code 0 begins in the SDK's encoding.
var codeZero = []byte(`"error":{"code":0`)

// rewriteCodeZero returns b, a stretch of a Streamable HTTP answer (SSE
// events whose data lines are JSON-RPC messages, or one JSON-RPC message
// or batch), with every response that has code 0 re-encoded by
// withoutCodeZero; ok is false when there was none.
func rewriteCodeZero(b []byte) (out []byte, ok bool) {
	if !bytes.Contains(b, codeZero) {
		return nil, false
	}
	lines := bytes.SplitAfter(b, []byte{'\n'})
	for i, line := range lines {
		if !bytes.Contains(line, codeZero) {
			continue
		}
		content := bytes.TrimRight(line, "\r\n")
		tail := line[len(content):]
		body := content
		if d, cut := bytes.CutPrefix(content, []byte("data:")); cut {
			body = bytes.TrimLeft(d, " ")
		}
		head := content[:len(content)-len(body)] // "data: ", or nothing
		fixed, changed := fixMessages(body)
		if !changed {
			continue
		}
		lines[i] = append(append(append([]byte(nil), head...), fixed...), tail...)
		ok = true
	}
	if !ok {
		return nil, false
	}
	return bytes.Join(lines, nil), true
}

// fixMessages re-encodes the responses with code 0 in one JSON-RPC
// message or batch.
func fixMessages(b []byte) ([]byte, bool) {
	if m, err := jsonrpc.DecodeMessage(b); err == nil {
		if r, isResp := m.(*jsonrpc.Response); isResp {
			return withoutCodeZero(r)
		}
		return nil, false
	}
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return nil, false
	}
	batch := make([][]byte, len(raw))
	changed := false
	for i, m := range raw {
		batch[i] = m
		if fixed, ok := fixMessages(m); ok {
			batch[i], changed = fixed, true
		}
	}
	if !changed {
		return nil, false
	}
	return append(append([]byte{'['}, bytes.Join(batch, []byte{','})...), ']'), true
}

// codeZeroWriter is the Streamable HTTP handler's ResponseWriter: what the
// SDK writes passes through unchanged (and unbuffered: the SDK writes
// each SSE event, and each JSON body, in one Write), except answers with
// code 0 (rewriteCodeZero). Flushes reach the connection through Unwrap.
type codeZeroWriter struct{ http.ResponseWriter }

func (w codeZeroWriter) Write(p []byte) (int, error) {
	out, ok := rewriteCodeZero(p)
	if !ok {
		return w.ResponseWriter.Write(p)
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w codeZeroWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
