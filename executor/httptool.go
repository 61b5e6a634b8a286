package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/httpspec"
	"github.com/sandboxd/sandboxd/internal/rawbuf"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// HTTP is the style of a declarative HTTP tool (spec.kind "http"): sandboxd
// performs the request the spec describes; no Wasm runs.
const HTTP Style = "http"

// Limits of a declarative HTTP tool's error answers (Kindgi HttpToolSpec).
const (
	maxErrorBodyExcerpt   = 4 << 10
	maxMessageBodyExcerpt = 512
)

// httpHandler performs a declarative HTTP tool's request (spec.kind
// "http"); no Wasm runs.
type httpHandler struct {
	*toolEnv
	spec *httpspec.Spec
}

func (h *httpHandler) style() Style { return HTTP }

func (h *httpHandler) close(context.Context) error { return nil }

// run performs a declarative HTTP tool's request through the same egress
// policy, dialer and budgets as the HTTP import.
func (t *httpHandler) run(ctx context.Context, inv *invocation, _ map[string]string) *runOutcome {
	s := t.spec
	acct := limits.NewAccount(t.memLimit)
	inv.acct = acct
	out := &runOutcome{}
	defer func() { out.peak = acct.Peak() }()
	if !acct.Reserve(int64(len(inv.input))) {
		out.err = t.memExceeded(acct.Refused(), fmt.Sprintf("the input (%d bytes) does not fit in memMB %d", len(inv.input), t.limits.memMB))
		return out
	}
	var (
		in         map[string]any
		u          string
		hdr        map[string]string
		literal    map[string]bool
		holdsInput bool
	)
	if out.err = t.hostWork(ctx, out, func(w manifest.Work, tick func()) error {
		v, err := manifest.DecodeValue(inv.input, w.Check)
		if err != nil && !isSyntax(err) {
			return err // stopped
		}
		in, _ = v.(map[string]any) // a non-object input fills no placeholder
		// The templates' fills: their passes over each value they place
		// (escaping, the path and header checks) tick every 64 KiB.
		if u, err = s.URL(in, tick); err != nil {
			return expandError(s, err)
		}
		if hdr, literal, holdsInput, err = s.Headers(in, tick); err != nil {
			return expandError(s, err)
		}
		return nil
	}); out.err != nil {
		return out
	}
	if s.AuthHeader != "" {
		if _, ok := inv.secretValue(s.AuthSecret); !ok && !inv.replaying() { // the secretRef is one of t.secretNames; a replay has no values

			out.err = &toolerr.Error{Code: toolerr.InputValidationFailed, Message: "secret " + s.AuthSecret + " (spec.authorization.secretRef) has no value",
				Issues: []toolerr.Issue{{InstancePath: "/ctx/secrets", SchemaPath: "#/spec/authorization/secretRef", Keyword: "required",
					Params: map[string]any{"missingProperty": s.AuthSecret}, Message: "must have required property '" + s.AuthSecret + "'"}}}
			return out
		}
		// The credential replaces any spec header of that name, in any
		// spelling (Kindgi's assignment replaces the exact one).
		for k := range hdr {
			if strings.EqualFold(k, s.AuthHeader) {
				delete(hdr, k)
				delete(literal, k)
			}
		}
		hdr[s.AuthHeader] = s.AuthPrefix + egress.SecretPlaceholder(s.AuthSecret)
	}
	// The body is built on the call's CPU clock too, a meter point every
	// 64 KiB of work; it is charged to memMB as it grows.
	var body []byte
	var contentType string
	if out.err = t.hostWork(ctx, out, func(_ manifest.Work, tick func()) error {
		var err error
		body, contentType, err = s.Body(inv.input, in, httpspec.Meter{Tick: tick, Grow: func(n int) bool { return acct.Reserve(int64(n)) }})
		var tl *httpspec.BodyTooLargeError
		switch {
		case errors.As(err, &tl):
			return t.memExceeded(acct.Refused(), fmt.Sprintf("the request body (%d bytes so far) does not fit in memMB %d", tl.Size, t.limits.memMB))
		case err != nil:
			return toolerr.New(toolerr.InputValidationFailed, "the request body: %v", err)
		}
		return nil
	}); out.err != nil {
		return out
	}
	if contentType != "" && !s.SetsHeader("Content-Type") {
		hdr["Content-Type"] = contentType
	}
	opts := t.egressOptions(inv) // the options every kind's egress uses
	opts.Limits.RequestTimeout = s.Timeout
	if holdsInput {
		if out.err = httpspec.HeaderBytesError(hdr, opts.Limits.MaxRequestHeaderBytes); out.err != nil {
			return out
		}
	}
	sess := egress.NewSession(t.policy, opts)
	defer sess.Close()
	inv.mu.Lock()
	inv.egress = &egressState{session: sess}
	inv.mu.Unlock()
	status, _, resp, err := inv.httpDo(ctx, &egress.Request{Method: s.Method, URL: u, Header: hdr, Literal: literal, Body: body}) // sess, or the call's tape (record.go)
	if err != nil {
		out.err = t.httpToolError(ctx, acct, err)
		return out
	}
	defer resp.Close()
	// The body streams into a buffer charged to the call's memMB account
	// (limits-exceeded memMB past it); bodies of error answers only up to
	// the excerpt. What the session hands over is already redacted: every
	// substituted secret value is replaced by its marker (F08).
	success := status >= s.OKMin && status <= s.OKMax
	capAt := int64(-1)
	if !success {
		capAt = maxErrorBodyExcerpt
	}
	data, err := readCharged(resp, acct, capAt)
	if err != nil {
		if errors.Is(err, errMemMB) {
			out.err = t.memExceeded(acct.Refused(), fmt.Sprintf("the response body does not fit in memMB %d", t.limits.memMB))
			return out
		}
		out.err = t.httpToolError(ctx, acct, err)
		return out
	}
	if !success {
		// Like Kindgi, the message carries the start of the body (the
		// first 512 bytes, redacted); details.body has up to the excerpt.
		body := sess.Redact(sanitizeLine(data))
		msg := fmt.Sprintf("the server answered %d %s, outside successStatus %d-%d", status, http.StatusText(status), s.OKMin, s.OKMax)
		if body != "" {
			msg += ": " + truncateUTF8(body, maxMessageBodyExcerpt)
		}
		out.err = &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"status": status, "body": body}}
		return out
	}
	if !s.ParseJSON {
		// Quoting is two passes over the body, on the call's CPU clock,
		// each checked every hostChunk bytes.
		out.err = t.hostWork(ctx, out, func(_ manifest.Work, tick func()) error {
			n := jsonStringLen(data, tick)
			if !acct.Reserve(int64(n)) {
				return t.memExceeded(acct.Refused(), fmt.Sprintf("the output does not fit in memMB %d", t.limits.memMB))
			}
			out.output = appendJSONString(rawbuf.Uncleared(n), data, tick)
			return nil
		})
		if out.err != nil {
			out.output = nil
		}
		return out
	}
	if len(data) == 0 {
		out.output = []byte("null") // Kindgi: an empty body parses to null
		return out
	}
	valid := false
	if out.err = t.hostWork(ctx, out, func(_ manifest.Work, tick func()) error {
		valid = validJSON(data, tick)
		return nil
	}); out.err != nil {
		return out
	}
	if !valid {
		msg := "the response body was not valid JSON (spec.parseJson is true)"
		if len(data) <= maxSyntaxDetail {
			// json.Unmarshal's words for the problem: one more pass,
			// uncharged, so only over a small body.
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				msg += ": " + err.Error()
			}
		}
		out.err = &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"status": status}}
		return out
	}
	out.output = data
	return out
}

// maxSyntaxDetail is the largest invalid response body whose error message
// says where it is invalid.
const maxSyntaxDetail = 1 << 20

// hostStop carries a check's error out of a ticking pass.
type hostStop struct{ err error }

// hostWork runs fn, host work the call causes, on a locked OS thread whose
// CPU time is added to out.cpu (usage.cpuMs), with the Work of a validation
// (validating): w.Check, and tick, which panics to stop fn, end it when ctx
// ends (deadline-exceeded, cancelled) or when the call's CPU time passes
// cpuMs (limits-exceeded cpuMs). fn's own error is returned as is.
func (t *httpHandler) hostWork(ctx context.Context, out *runOutcome, fn func(w manifest.Work, tick func()) error) error {
	left := time.Duration(0)
	if t.limits.cpuMs > 0 {
		left = max(time.Duration(t.limits.cpuMs)*time.Millisecond-out.cpu, 1)
	}
	cpu, err := t.validating(ctx, left, func(w manifest.Work) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s, ok := r.(hostStop)
				if !ok {
					panic(r)
				}
				err = s.err
			}
		}()
		return fn(w, func() {
			if err := w.Check(); err != nil {
				panic(hostStop{err})
			}
		})
	})
	out.cpu += cpu
	if errors.Is(err, errValidationCPU) {
		return t.cpuExceeded(out.cpu, "the HTTP tool's host work (decoding its input, filling its templates, building the request body, checking or quoting the response body)")
	}
	return err
}

// isSyntax reports whether err is a decoding failure of the document
// itself (not a check's stop).
func isSyntax(err error) bool {
	var te *toolerr.Error
	return !errors.As(err, &te) && !errors.Is(err, errValidationCPU)
}

// expandError maps a template of s that the input cannot fill. When some
// input valid against the tool's schema would have filled it, the input is
// at fault: input-validation-failed with an Ajv-shaped issue, before any
// request (as for every other input and needs check). When none could —
// the template names a key the input schema forbids — the tool's own
// definition is broken and no caller can fix it: handler-error, as Kindgi
// answers for every unfillable placeholder.
func expandError(s *httpspec.Spec, err error) error {
	var he *httpspec.HeaderValueError
	if errors.As(err, &he) {
		te := toolerr.New(toolerr.InputValidationFailed, "%v", err)
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(he.Param), SchemaPath: he.SchemaPath, Keyword: "headerValue",
			Params: map[string]any{"placeholder": he.Param, "header": he.Header}, Message: "must be valid in a header value: it " + he.Reason}}
		return te
	}
	var se *httpspec.SegmentError
	if errors.As(err, &se) {
		te := toolerr.New(toolerr.InputValidationFailed, "%v", err)
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(se.Param), SchemaPath: "#/spec/urlTemplate", Keyword: "pathSegment",
			Params: map[string]any{"placeholder": se.Param}, Message: "must fill exactly one path segment: it " + se.Reason}}
		return te
	}
	var fe *httpspec.FillError
	if !errors.As(err, &fe) {
		return toolerr.New(toolerr.InputValidationFailed, "%v", err)
	}
	if s.Unfillable(fe.Param) {
		return toolerr.New(toolerr.HandlerError, "%s, and the tool's input schema does not admit that key", fe.Error())
	}
	te := toolerr.New(toolerr.InputValidationFailed, "%s", fe.Error())
	sp := fe.SchemaPath
	if sp == "" {
		sp = "#/spec/urlTemplate"
	}
	if fe.Missing {
		te.Issues = []toolerr.Issue{{InstancePath: "", SchemaPath: sp, Keyword: "required",
			Params: map[string]any{"missingProperty": fe.Param}, Message: "must have required property '" + fe.Param + "'"}}
	} else {
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(fe.Param), SchemaPath: sp, Keyword: "type",
			Params: map[string]any{"type": "string,number,boolean"}, Message: "must be a primitive (string, number or boolean)"}}
	}
	return te
}

// httpToolError maps an egress failure of a declarative HTTP tool.
func (t *httpHandler) httpToolError(ctx context.Context, acct *limits.Account, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return toolerr.Wrap(toolerr.DeadlineExceeded, context.DeadlineExceeded, "the wall deadline passed during the request")
	case errors.Is(ctx.Err(), context.Canceled):
		return toolerr.Wrap(toolerr.Cancelled, context.Canceled, "the call was cancelled")
	}
	reason := egress.ReasonOf(err)
	msg := egress.MessageOf(err)
	switch reason {
	case egress.ReasonDenied:
		return &toolerr.Error{Code: toolerr.PolicyRefused, Message: msg, Details: map[string]any{"egress": string(reason)}}
	case egress.ReasonMemoryBudget:
		return t.memExceeded(acct.Refused(), msg)
	}
	return &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"egress": string(reason)}}
}

// truncateUTF8 cuts s to at most n bytes, not inside a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
