package executor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Caps of the HTTP import besides the egress budgets.
const (
	maxHTTPRequestJSON = 256 << 10 // the request description (method, url, headers)
	maxBodyReadChunk   = 64 << 10  // bytes copied per http_body_read
)

// parseNetwork parses a manifest's network policy. Invalid entries are
// invalid-tool-definition naming the entry.
func parseNetwork(m *manifest.Manifest) (*egress.Policy, error) {
	kind, hosts := "", []string(nil)
	if m.Network != nil {
		kind, hosts = m.Network.Kind, m.Network.Hosts
	}
	p, err := egress.ParsePolicy(kind, hosts)
	if err != nil {
		e := toolerr.Wrap(toolerr.InvalidToolDefinition, err, "")
		var ee *egress.EntryError
		if errors.As(err, &ee) {
			e.Details = map[string]any{"pointer": "/network/hosts/" + strconv.Itoa(ee.Index), "entry": ee.Entry}
		}
		return nil, e
	}
	return p, nil
}

// egressState is one invocation's HTTP import state: its egress session and
// open response handles. It is created by the first http_request and closed
// when the invocation's context ends.
type egressState struct {
	session *egress.Session
	mu      sync.Mutex
	handles map[int32]*openResponse
	next    int32
}

type openResponse struct {
	status  int
	body    io.ReadCloser // the *egress.Response, or a recorded or replayed body (record.go)
	headers []byte        // JSON, computed once
	eof     bool
}

// egressOptions builds the session options of one invocation, for every
// handler kind: the operator's resolver, dialer, ranges, TLS and budgets,
// the call's memory account, and the tool's secrets (secretValue).
func (t *toolEnv) egressOptions(inv *invocation) egress.Options {
	ec := t.cfg.egress
	return egress.Options{
		Resolver:    ec.resolver,
		Dial:        ec.dial,
		AllowRanges: ec.allowRanges,
		TLSConfig:   ec.tls,
		Limits:      ec.limits,
		Memory:      inv.acct,
		Secret:      func(name string) (string, bool) { return inv.secretValue(name) },
		// Substituted values are redacted from responses and errors by the
		// session; bound secrets go only to their destinations.
		SecretDestinations: ec.secretDests,
		Trace:              inv.egressTrace(),
	}
}

// egressTrace is the session's per-hop trace hook: the call's Tracer's
// Egress, or nil without one.
func (inv *invocation) egressTrace() func(string, egress.Origin) (string, func(int, error)) {
	if inv.trace == nil {
		return nil
	}
	return inv.trace.Egress
}

// secretValue returns a declared secret: from the call context first, then
// from the operator's source. Undeclared names have no value.
func (inv *invocation) secretValue(name string) (string, bool) {
	if !inv.tool.secretNames[name] {
		return "", false
	}
	if v, ok := inv.secrets[name]; ok {
		return v, true
	}
	return inv.tool.exec.cfg.egress.operatorSecret(inv.tool.ID(), name)
}

// secretGet implements secret_get: refused under strict, not-found for
// undeclared or missing names. Messages name the secret, never its value.
func (inv *invocation) secretGet(name string) ([]byte, abi.Errno, string) {
	if inv.tool.posture == manifest.PostureStrict {
		return nil, abi.ErrDenied, "secrets are not readable under the strict posture; put " + egress.SecretPlaceholder(name) + " in a request header instead"
	}
	if !inv.tool.needs.secrets[name] {
		return nil, abi.ErrNotFound, "secret " + name + " is not declared in needsSpec.secrets"
	}
	if inv.tape != nil {
		if v, ok := inv.tape.secret(name); ok { // a replay's placeholder (docs/replay.md)
			return v, 0, ""
		}
	}
	v, ok := inv.secretValue(name)
	if !ok {
		return nil, abi.ErrNotFound, "secret " + name + " has no value"
	}
	return []byte(v), 0, ""
}

// egressFor returns the invocation's egress state, starting it on first use.
// ctx is the host call's context: the state is closed when it ends.
func (inv *invocation) egressFor(ctx context.Context) *egressState {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.egress != nil {
		return inv.egress
	}
	st := &egressState{session: egress.NewSession(inv.tool.policy, inv.tool.egressOptions(inv)), handles: map[int32]*openResponse{}}
	inv.egress = st
	context.AfterFunc(ctx, st.session.Close)
	return st
}

// EgressAttempts returns the audit trail of an invocation's egress.
func (inv *invocation) egressAttempts() []egress.Attempt {
	inv.mu.Lock()
	st := inv.egress
	inv.mu.Unlock()
	if st == nil || st.session == nil { // a replay has no session
		return nil
	}
	a, _ := st.session.Attempts()
	return a
}

// httpRequestJSON is http_request's request description.
type httpRequestJSON struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

func (inv *invocation) httpRequest(ctx context.Context, mod api.Module, reqPtr, reqLen, bodyPtr, bodyLen uint32) int64 {
	if reqLen > maxHTTPRequestJSON {
		return int64(inv.fail(abi.ErrInvalid, "the request description is %d bytes, over the %d-byte cap", reqLen, maxHTTPRequestJSON))
	}
	raw, ok := viewGuest(mod, reqPtr, reqLen)
	if !ok {
		return int64(inv.fail(abi.ErrOutOfBounds, "request [%d, %d) is outside guest memory", reqPtr, uint64(reqPtr)+uint64(reqLen)))
	}
	var rj httpRequestJSON
	if err := json.Unmarshal(raw, &rj); err != nil {
		return int64(inv.fail(abi.ErrInvalid, "the request is not JSON {\"method\",\"url\",\"headers\"}: %v", err))
	}
	if rj.URL == "" {
		return int64(inv.fail(abi.ErrInvalid, "the request has no url"))
	}
	var body []byte
	if bodyLen > 0 {
		b, ok := readGuest(mod, bodyPtr, bodyLen)
		if !ok {
			return int64(inv.fail(abi.ErrOutOfBounds, "body [%d, %d) is outside guest memory", bodyPtr, uint64(bodyPtr)+uint64(bodyLen)))
		}
		body = b
	}
	status, header, rbody, err := inv.httpDo(ctx, &egress.Request{Method: rj.Method, URL: rj.URL, Header: rj.Headers, Body: body})
	if err != nil {
		return int64(inv.fail(errnoOf(err), "%s", egress.MessageOf(err)))
	}
	hdr, _ := json.Marshal(headersMap(header)) // encoding/json sorts the names
	st := inv.handlesFor(ctx)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.next++
	h := st.next
	st.handles[h] = &openResponse{status: status, body: rbody, headers: hdr}
	return int64(h)
}

// response looks up an open response handle.
func (inv *invocation) response(h int32) (*egressState, *openResponse, int32) {
	inv.mu.Lock()
	st := inv.egress
	inv.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		r := st.handles[h]
		st.mu.Unlock()
		if r != nil {
			return st, r, 0
		}
	}
	return nil, nil, inv.fail(abi.ErrBadHandle, "unknown or closed response handle %d", h)
}

func (inv *invocation) httpStatus(h int32) int32 {
	_, r, errno := inv.response(h)
	if r == nil {
		return errno
	}
	return int32(r.status)
}

func (inv *invocation) httpHeaders(mod api.Module, h int32, ptr, n uint32) int32 {
	_, r, errno := inv.response(h)
	if r == nil {
		return errno
	}
	return inv.copyOut(mod, r.headers, ptr, n)
}

func (inv *invocation) httpBodyRead(mod api.Module, h int32, ptr, n uint32) int32 {
	_, r, errno := inv.response(h)
	if r == nil {
		return errno
	}
	if n == 0 || r.eof {
		return 0
	}
	mem := mod.Memory()
	if mem == nil {
		return inv.fail(abi.ErrOutOfBounds, "the module has no memory")
	}
	if _, ok := mem.Read(ptr, n); !ok {
		return inv.fail(abi.ErrOutOfBounds, "buffer [%d, %d) is outside guest memory", ptr, uint64(ptr)+uint64(n))
	}
	buf := make([]byte, min(n, maxBodyReadChunk))
	for {
		k, err := r.body.Read(buf)
		if k > 0 {
			mem.Write(ptr, buf[:k])
			return int32(k)
		}
		if err == io.EOF {
			r.eof = true
			return 0
		}
		if err != nil {
			return inv.fail(errnoOf(err), "%s", egress.MessageOf(err))
		}
	}
}

func (inv *invocation) httpClose(h int32) int32 {
	st, r, errno := inv.response(h)
	if r == nil {
		return errno
	}
	st.mu.Lock()
	delete(st.handles, h)
	st.mu.Unlock()
	_ = r.body.Close()
	return 0
}

// checkSecrets runs before the guest: every secret declared in
// needsSpec.secrets must have a value (from the call context or the
// operator's source) that satisfies its declared schema, unless a `needs`
// entry names it with optional: true (Kindgi's Need.optional). Failures are
// input-validation-failed with issues under /ctx/secrets that never carry
// the value. The values' validations share w (the call's deadline and
// work budget, validate.go; G01), each spending at most its part of
// w.Limit: over it, input-validation-failed naming the budget; stopped,
// w.Check's error.
func (inv *invocation) checkSecrets(w manifest.Work) error {
	checks := inv.tool.needs.secretChecks // compiled at load (compileNeeds)
	if len(checks) == 0 {
		return nil
	}
	var issues []toolerr.Issue
	// The values share the call's work budget: each may spend its part.
	if w.Limit > 0 {
		w.Limit = max(w.Limit/int64(len(checks)), 1)
	}
	for _, c := range checks {
		v, ok := inv.secretValue(c.name)
		if !ok {
			if !c.optional {
				issues = append(issues, toolerr.Issue{InstancePath: "/ctx/secrets", SchemaPath: "#/needsSpec/secrets", Keyword: "required",
					Params: map[string]any{"missingProperty": c.name}, Message: "must have required property '" + c.name + "'"})
			}
			continue
		}
		doc, _ := json.Marshal(v)
		_, iss, err := c.schema.ValidateLimited(doc, false, manifest.DefaultValidationBudget, w)
		if err := needsStopped(c.pointer, err); err != nil {
			return err
		}
		for _, is := range iss {
			// Params may echo parts of the value (const, enum matches):
			// keep only what the schema says, never the secret.
			issues = append(issues, toolerr.Issue{InstancePath: c.pointer + is.InstancePath, SchemaPath: is.SchemaPath, Keyword: is.Keyword,
				Params: map[string]any{}, Message: "the secret does not satisfy its declared schema (" + is.Keyword + ")"})
		}
	}
	if len(issues) > 0 {
		return &toolerr.Error{Code: toolerr.InputValidationFailed, Message: "secrets do not satisfy needsSpec.secrets: " + issues[0].InstancePath + " " + issues[0].Message, Issues: issues}
	}
	return nil
}
