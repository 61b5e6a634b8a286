package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// HTTP is the style of a declarative HTTP tool (spec.kind "http"): sandboxd
// performs the request the spec describes; no Wasm runs.
const HTTP Style = "http"

// Defaults of a declarative HTTP tool (Kindgi HttpToolSpec).
const (
	defaultHTTPToolTimeout = 30 * time.Second
	maxErrorBodyExcerpt    = 4 << 10
	maxMessageBodyExcerpt  = 512
)

// httpSpec is a compiled spec.kind "http".
type httpSpec struct {
	method string
	tmpl   urlTemplate
	// unfillable holds the placeholders the input schema can never carry
	// (not in its properties, additionalProperties false): a template
	// naming one is a broken tool, not a bad input.
	unfillable map[string]bool
	headers    []headerTemplate
	authHeader string // header carrying the secret, "" for none
	authPrefix string // "Bearer " for bearer auth
	authSecret string // secretRef.name
	bodyKind   string // "", json-input, input-passthrough, text
	bodyTmpl   string
	timeout    time.Duration
	parseJSON  bool
	okMin      int
	okMax      int
	policy     *egress.Policy
}

type httpSpecJSON struct {
	Kind          string `json:"kind"`
	Method        string `json:"method"`
	URLTemplate   string `json:"urlTemplate"`
	Headers       []struct{ Name, Value string }
	Authorization *struct {
		Kind       string `json:"kind"`
		HeaderName string `json:"headerName"`
		SecretRef  struct {
			EnvName string `json:"envName"`
			Name    string `json:"name"`
		} `json:"secretRef"`
	} `json:"authorization"`
	RequestBody *struct {
		Kind     string `json:"kind"`
		Template string `json:"template"`
	} `json:"requestBody"`
	TimeoutMs     *int64 `json:"timeoutMs"`
	ParseJSON     *bool  `json:"parseJson"`
	SuccessStatus *struct {
		Min int `json:"min"`
		Max int `json:"max"`
	} `json:"successStatus"`
}

func specErr(format string, args ...any) error {
	return toolerr.New(toolerr.InvalidToolDefinition, "spec: "+format, args...)
}

// compileHTTPSpec checks a spec.kind "http" at load: the URL template (a
// placeholder only in the path or query), the headers, the authorization
// and the network policy (pol, compiled from the manifest), which must admit
// the template's origin. With no network in the manifest the tool may reach
// only that origin: spec.policy is then that one-entry allowlist.
func compileHTTPSpec(m *manifest.Manifest, pol *egress.Policy) (*httpSpec, error) {
	var sj httpSpecJSON
	if err := json.Unmarshal(m.Spec, &sj); err != nil {
		return nil, specErr("%v", err)
	}
	if sj.Kind != "http" {
		return nil, toolerr.New(toolerr.LevelNotSupported, "spec.kind %q is not supported (only \"http\")", sj.Kind)
	}
	s := &httpSpec{method: sj.Method, timeout: defaultHTTPToolTimeout, parseJSON: true, okMin: 200, okMax: 299}
	tmpl, origin, err := parseURLTemplate(sj.URLTemplate)
	if err != nil {
		// Kindgi's registration error names the field as spec.urlTemplate.
		return nil, toolerr.New(toolerr.InvalidToolDefinition, "spec.urlTemplate: %v", err)
	}
	s.tmpl = tmpl
	params := tmpl.params
	for i, h := range sj.Headers {
		if !isHeaderToken(h.Name) || strings.ContainsAny(h.Value, "\r\n\x00") {
			return nil, specErr("headers[%d]: invalid header %q", i, h.Name)
		}
		ht, err := parseHeaderTemplate(i, h.Name, h.Value)
		if err != nil {
			return nil, specErr("headers[%d] (%s): %v", i, h.Name, err)
		}
		s.headers = append(s.headers, ht)
		params = append(params, ht.params...)
	}
	s.unfillable = unfillableKeys(m.Input, params)
	if a := sj.Authorization; a != nil {
		s.authSecret = a.SecretRef.Name
		switch a.Kind {
		case "bearer":
			s.authHeader, s.authPrefix = "Authorization", "Bearer "
		case "header":
			if !isHeaderToken(a.HeaderName) {
				return nil, specErr("authorization.headerName %q is not a header name", a.HeaderName)
			}
			s.authHeader = a.HeaderName
		default:
			return nil, specErr("authorization.kind %q is not bearer or header", a.Kind)
		}
		if strings.ContainsAny(s.authSecret, "{}") {
			return nil, specErr("authorization.secretRef.name %q is not a secret name", s.authSecret)
		}
	}
	if b := sj.RequestBody; b != nil {
		s.bodyKind, s.bodyTmpl = b.Kind, b.Template
	}
	if sj.TimeoutMs != nil {
		s.timeout = time.Duration(*sj.TimeoutMs) * time.Millisecond
	}
	if sj.ParseJSON != nil {
		s.parseJSON = *sj.ParseJSON
	}
	if ss := sj.SuccessStatus; ss != nil {
		if ss.Min > ss.Max {
			return nil, specErr("successStatus.min %d is over max %d", ss.Min, ss.Max)
		}
		s.okMin, s.okMax = ss.Min, ss.Max
	}
	if m.Network == nil {
		entry := origin.Scheme + "://" + origin.Host.String() + ":" + strconv.Itoa(origin.Port)
		s.policy, err = egress.ParsePolicy("allowlist", []string{entry})
		if err != nil {
			return nil, err
		}
	} else {
		s.policy = pol
	}
	if _, ok := s.policy.Match(origin); !ok {
		return nil, toolerr.New(toolerr.InvalidToolDefinition, "spec.urlTemplate's origin %s is not admitted by the tool's network policy", origin)
	}
	if s.authHeader != "" && s.policy.Kind() != egress.KindAllowlist {
		return nil, toolerr.New(toolerr.InvalidToolDefinition, "spec.authorization sends a secret, which goes only to allowlisted destinations: use network kind \"allowlist\" or omit network")
	}
	return s, nil
}

// unfillableKeys returns the params an object input valid against schema
// can never carry: the schema's top-level properties lack them and its
// additionalProperties is false (patternProperties aside, which may admit
// them). Anything it cannot tell stays fillable.
func unfillableKeys(schema json.RawMessage, params []string) map[string]bool {
	var sc struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		PatternProperties    map[string]json.RawMessage `json:"patternProperties"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	}
	if json.Unmarshal(schema, &sc) != nil || len(sc.PatternProperties) > 0 || string(bytes.TrimSpace(sc.AdditionalProperties)) != "false" {
		return nil
	}
	var out map[string]bool
	for _, p := range params {
		if _, ok := sc.Properties[p]; !ok {
			if out == nil {
				out = map[string]bool{}
			}
			out[p] = true
		}
	}
	return out
}

// fillError is a placeholder the input cannot fill: missing, null, or not
// a string, number or boolean.
type fillError struct {
	param      string
	missing    bool
	msg        string
	schemaPath string // where the placeholder is; "" for #/spec/urlTemplate
}

func (e *fillError) Error() string { return e.msg }

// urlTemplate is a URL split at its {param} placeholders.
type urlTemplate struct {
	parts  []string // literal text; len(parts) == len(params)+1
	params []string
	query  []bool // whether params[i] is in the query (else the path)
}

var placeholderName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// parseURLTemplate splits a template and checks that every placeholder is
// in the path or query — never the scheme, userinfo, host or port — and
// that the rest is an absolute http(s) URL. It returns the origin.
func parseURLTemplate(t string) (urlTemplate, egress.Origin, error) {
	var ut urlTemplate
	schemeEnd := strings.Index(t, "://")
	if schemeEnd < 0 {
		return ut, egress.Origin{}, errors.New("not an absolute http or https URL")
	}
	authEnd := len(t)
	if i := strings.IndexAny(t[schemeEnd+3:], "/?#"); i >= 0 {
		authEnd = schemeEnd + 3 + i
	}
	queryStart := strings.IndexByte(t, '?')
	rest := t
	pos := 0
	for {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			ut.parts = append(ut.parts, rest)
			break
		}
		if rest[i] == '}' {
			return ut, egress.Origin{}, fmt.Errorf("unbalanced '}' at %d", pos+i)
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return ut, egress.Origin{}, fmt.Errorf("unterminated placeholder at %d", pos+i)
		}
		name := rest[i+1 : i+j]
		if !placeholderName.MatchString(name) {
			return ut, egress.Origin{}, fmt.Errorf("invalid placeholder {%s}", name)
		}
		if pos+i < authEnd {
			return ut, egress.Origin{}, fmt.Errorf("placeholder {%s} is in the scheme, userinfo, host or port; placeholders may appear only in the path or query", name)
		}
		if strings.Contains(t[:pos+i], "#") {
			return ut, egress.Origin{}, fmt.Errorf("placeholder {%s} is in the fragment", name)
		}
		ut.parts = append(ut.parts, rest[:i])
		ut.params = append(ut.params, name)
		ut.query = append(ut.query, queryStart >= 0 && pos+i > queryStart)
		rest = rest[i+j+1:]
		pos += i + j + 1
	}
	_, o, err := egress.ParseURL(strings.Join(ut.parts, "x"))
	if err != nil {
		return ut, egress.Origin{}, err
	}
	return ut, o, nil
}

// expand fills the template from the input object; values are
// percent-encoded for their position. A path placeholder's value always
// stays inside its one segment of the template's path: a value that could
// add, remove or climb segments once a server or proxy decodes and
// normalises the path is refused with a *segmentError (F10).
func (ut urlTemplate) expand(input map[string]any) (string, error) {
	var b strings.Builder
	var spans []filledSpan
	for i, p := range ut.params {
		b.WriteString(ut.parts[i])
		s, err := placeholderText(input, p, "urlTemplate", "", scalarString)
		if err != nil {
			return "", err
		}
		if ut.query[i] {
			// A space is %20, as Kindgi's encodeURIComponent writes it,
			// not QueryEscape's '+' (which it writes for a space only: a
			// literal '+' is %2B), so no server can read it either way.
			b.WriteString(strings.ReplaceAll(url.QueryEscape(s), "+", "%20"))
			continue
		}
		if reason := pathValueProblem(s); reason != "" {
			return "", &segmentError{param: p, reason: reason}
		}
		start := b.Len()
		b.WriteString(url.PathEscape(s))
		spans = append(spans, filledSpan{p, start, b.Len()})
	}
	b.WriteString(ut.parts[len(ut.parts)-1])
	out := b.String()
	// The whole segment each value lands in (the template may put literal
	// text or other placeholders beside it) must still be one ordinary
	// segment: not empty, not a dot segment in any spelling.
	for _, sp := range spans {
		from := strings.LastIndexByte(out[:sp.start], '/') + 1
		to := len(out)
		if i := strings.IndexAny(out[sp.end:], "/?#"); i >= 0 {
			to = sp.end + i
		}
		if reason := segmentProblem(out[from:to]); reason != "" {
			return "", &segmentError{param: sp.param, reason: reason}
		}
	}
	return out, nil
}

// filledSpan is where a placeholder's value landed in a filled template.
type filledSpan struct {
	param      string
	start, end int
}

// segmentError is a path placeholder value that would change the path's
// segments.
type segmentError struct{ param, reason string }

func (e *segmentError) Error() string {
	return fmt.Sprintf("{%s}: the value %s; a path placeholder fills exactly one path segment", e.param, e.reason)
}

// decodeFully percent-decodes s until it stops changing (at most 4 rounds,
// for servers and proxies that decode more than once); an invalid escape
// ends the decoding where it is.
func decodeFully(s string) string {
	for range 4 {
		d, err := url.PathUnescape(s)
		if err != nil || d == s {
			return s
		}
		s = d
	}
	return s
}

// pathValueProblem says why a path placeholder value is refused, or "".
// It looks at the value as written and fully decoded, also after Unicode
// compatibility normalisation (fullwidth "／", "．"): no '/' or '\'
// (%2F, %5C), no control characters, valid UTF-8.
func pathValueProblem(v string) string {
	for _, d := range []string{v, decodeFully(v)} {
		if !utf8.ValidString(d) {
			return "is not valid UTF-8 once percent-decoded"
		}
		for _, f := range []string{d, norm.NFKC.String(d)} {
			if strings.ContainsAny(f, "/\\") {
				return "contains a path separator ('/' or '\\', encoded or not)"
			}
			for _, r := range f {
				if r < 0x20 || r == 0x7f {
					return "contains a control character"
				}
			}
		}
	}
	return ""
}

// segmentProblem says why an expanded path segment is refused, or "": empty
// (a server may collapse "//", removing a segment), or a dot segment in any
// spelling once decoded and normalised — ".", "..", "%2e%2E", "．．", "..;x"
// (servlet path parameters), ".. " or "..." (trimmed by some file systems).
func segmentProblem(seg string) string {
	d := decodeFully(seg)
	if d == "" {
		return "is empty (it would remove a path segment)"
	}
	for _, f := range []string{d, norm.NFKC.String(d)} {
		if i := strings.IndexByte(f, ';'); i >= 0 {
			f = f[:i]
		}
		f = strings.TrimRight(f, " \t")
		if f == "" || strings.Trim(f, ".") == "" {
			return "makes a dot segment (\".\" or \"..\", encoded or not)"
		}
	}
	return ""
}

// placeholderText is input[p] as format writes it, or a *fillError for a
// missing key or a value that is not a string, number or boolean; where
// names the template in the message, schemaPath its place ("" for
// #/spec/urlTemplate).
func placeholderText(input map[string]any, p, where, schemaPath string, format func(any) (string, error)) (string, error) {
	v, ok := input[p]
	if !ok {
		return "", &fillError{param: p, missing: true, schemaPath: schemaPath, msg: fmt.Sprintf("%s references {%s} but the input has no such key", where, p)}
	}
	s, err := format(v)
	if err != nil {
		return "", &fillError{param: p, schemaPath: schemaPath, msg: fmt.Sprintf("%s key {%s} must be a primitive (a string, number or boolean); got %s", where, p, jsonTypeName(v))}
	}
	return s, nil
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", errors.New("only strings, numbers and booleans can fill a placeholder")
}

// jsonTypeName is the JSON type of a decoded value (UseNumber).
func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}

// fillText fills a text body template (no encoding).
func fillText(tmpl string, input map[string]any) string {
	return placeholderRe.ReplaceAllStringFunc(tmpl, func(m string) string {
		v, ok := input[m[1:len(m)-1]]
		if !ok {
			return m // Kindgi: a missing key stays as the literal {key}
		}
		if v == nil {
			return "" // and null becomes ''
		}
		if s, err := scalarString(v); err == nil {
			return s
		}
		b, _ := json.Marshal(v)
		return string(b)
	})
}

var placeholderRe = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_.-]*\}`)

func isHeaderToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// requestHeaders fills the spec's headers from the input object: the
// header map, the names egress must send as written (their value holds
// input and their template no secret placeholder, so no input can name a
// secret; a mixed one was checked by fill), and whether any holds input.
// Of two headers of one name the later decides, as in the map.
func (s *httpSpec) requestHeaders(in map[string]any) (hdr map[string]string, literal map[string]bool, holdsInput bool, err error) {
	hdr = make(map[string]string, len(s.headers)+2)
	for _, h := range s.headers {
		v, err := h.fill(in)
		if err != nil {
			return nil, nil, false, err
		}
		hdr[h.name] = v
		holdsInput = holdsInput || len(h.params) > 0
		if len(h.params) == 0 || h.marker {
			delete(literal, h.name)
			continue
		}
		if literal == nil {
			literal = map[string]bool{}
		}
		literal[h.name] = true
	}
	return hdr, literal, holdsInput, nil
}

// headerBytesError is input-validation-failed when headers filled from the
// input are over egress's request header cap (limit, 0 for its default),
// counted as egress counts them; nothing is sent then.
func headerBytesError(hdr map[string]string, limit int) error {
	if limit <= 0 {
		limit = egress.DefaultLimits.MaxRequestHeaderBytes
	}
	n := 0
	for k, v := range hdr {
		n += len(k) + len(v) + 4
	}
	if n <= limit {
		return nil
	}
	te := toolerr.New(toolerr.InputValidationFailed, "the request headers, filled from the input, are %d bytes, over the %d-byte cap", n, limit)
	te.Issues = []toolerr.Issue{{InstancePath: "", SchemaPath: "#/spec/headers", Keyword: "headerBytes",
		Params: map[string]any{"limit": limit}, Message: "must fit the request's header byte cap once filled"}}
	return te
}

// requestBody is what a declarative HTTP tool sends, by Kindgi's rules
// (packages/tools/src/http.ts buildBody): a GET without requestBody sends
// nothing; any other method without requestBody, and "json-input", send
// the JSON of the input object minus the keys the urlTemplate's
// placeholders consumed (in the input's order) as application/json, or
// nothing (no Content-Type) when no key is left; "input-passthrough" sends
// the whole input as application/json; "text" sends the template filled
// without encoding as text/plain. raw is the validated input, in its
// decoded form.
func (s *httpSpec) requestBody(raw []byte, in map[string]any) (body []byte, contentType string, err error) {
	switch s.bodyKind {
	case "":
		if s.method == "GET" {
			return nil, "", nil
		}
		fallthrough
	case "json-input":
		consumed := make(map[string]bool, len(s.tmpl.params))
		for _, p := range s.tmpl.params {
			consumed[p] = true
		}
		body, err := jsonObjectWithout(raw, consumed)
		if err != nil {
			return nil, "", err
		}
		if body == nil {
			return nil, "", nil
		}
		return body, "application/json", nil
	case "input-passthrough":
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return nil, "", err
		}
		return c.Bytes(), "application/json", nil
	case "text":
		return []byte(fillText(s.bodyTmpl, in)), "text/plain", nil
	}
	return nil, "", fmt.Errorf("spec.requestBody.kind %q is not json-input, input-passthrough or text", s.bodyKind)
}

// setsHeader reports whether the spec's headers set name (compared without
// case: Kindgi compares the exact spelling "Content-Type", but a request
// must never carry two Content-Types).
func (s *httpSpec) setsHeader(name string) bool {
	for _, h := range s.headers {
		if strings.EqualFold(h.name, name) {
			return true
		}
	}
	return false
}

// jsonObjectWithout re-encodes the JSON object raw, compact, without its
// top-level keys in drop, the others in their order (JSON.stringify of
// Kindgi's "rest" object). It returns nil when no key is left.
func jsonObjectWithout(raw []byte, drop map[string]bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("the input is not a JSON object")
	}
	var out bytes.Buffer
	var val json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		if drop[key] {
			continue
		}
		if out.Len() == 0 {
			out.WriteByte('{')
		} else {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(key) // Marshal escapes <, >, & as \u003c...: same string to a JSON parser
		out.Write(kb)
		out.WriteByte(':')
		if err := json.Compact(&out, val); err != nil {
			return nil, err
		}
	}
	if out.Len() == 0 {
		return nil, nil
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// httpHandler performs a declarative HTTP tool's request (spec.kind
// "http"); no Wasm runs.
type httpHandler struct {
	*Tool
	spec *httpSpec
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
	var in map[string]any
	dec := json.NewDecoder(strings.NewReader(string(inv.input)))
	dec.UseNumber()
	_ = dec.Decode(&in) // a non-object input fills no placeholder
	u, err := s.tmpl.expand(in)
	if err != nil {
		out.err = s.expandError(err)
		return out
	}
	hdr, literal, holdsInput, err := s.requestHeaders(in)
	if err != nil {
		out.err = s.expandError(err)
		return out
	}
	if s.authHeader != "" {
		if _, ok := inv.secretValue(s.authSecret); !ok { // egress.go: the secretRef is one of t.secretNames

			out.err = &toolerr.Error{Code: toolerr.InputValidationFailed, Message: "secret " + s.authSecret + " (spec.authorization.secretRef) has no value",
				Issues: []toolerr.Issue{{InstancePath: "/ctx/secrets", SchemaPath: "#/spec/authorization/secretRef", Keyword: "required",
					Params: map[string]any{"missingProperty": s.authSecret}, Message: "must have required property '" + s.authSecret + "'"}}}
			return out
		}
		// The credential replaces any spec header of that name, in any
		// spelling (Kindgi's assignment replaces the exact one).
		for k := range hdr {
			if strings.EqualFold(k, s.authHeader) {
				delete(hdr, k)
				delete(literal, k)
			}
		}
		hdr[s.authHeader] = s.authPrefix + egress.SecretPlaceholder(s.authSecret)
	}
	body, contentType, err := s.requestBody(inv.input, in)
	if err != nil {
		out.err = toolerr.New(toolerr.InputValidationFailed, "the request body: %v", err)
		return out
	}
	if !acct.Reserve(int64(len(body))) {
		out.err = t.memExceeded(acct.Refused(), fmt.Sprintf("the request body (%d bytes) does not fit in memMB %d", len(body), t.limits.memMB))
		return out
	}
	if contentType != "" && !s.setsHeader("Content-Type") {
		hdr["Content-Type"] = contentType
	}
	opts := t.egressOptions(inv) // egress.go: the options every kind's egress uses
	opts.Limits.RequestTimeout = s.timeout
	if holdsInput {
		if out.err = headerBytesError(hdr, opts.Limits.MaxRequestHeaderBytes); out.err != nil {
			return out
		}
	}
	sess := egress.NewSession(t.policy, opts)
	defer sess.Close()
	inv.mu.Lock()
	inv.egress = &egressState{session: sess}
	inv.mu.Unlock()
	resp, err := sess.Do(ctx, &egress.Request{Method: s.method, URL: u, Header: hdr, Literal: literal, Body: body})
	if err != nil {
		out.err = t.httpToolError(ctx, acct, err)
		return out
	}
	defer resp.Close()
	// The body streams into a buffer charged to the call's memMB account
	// (limits-exceeded memMB past it); bodies of error answers only up to
	// the excerpt. What the session hands over is already redacted: every
	// substituted secret value is replaced by its marker (F08).
	success := resp.Status >= s.okMin && resp.Status <= s.okMax
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
		msg := fmt.Sprintf("the server answered %d %s, outside successStatus %d-%d", resp.Status, http.StatusText(resp.Status), s.okMin, s.okMax)
		if body != "" {
			msg += ": " + truncateUTF8(body, maxMessageBodyExcerpt)
		}
		out.err = &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"status": resp.Status, "body": body}}
		return out
	}
	if !s.parseJSON {
		n := jsonStringLen(data)
		if !acct.Reserve(int64(n)) {
			out.err = t.memExceeded(acct.Refused(), fmt.Sprintf("the output does not fit in memMB %d", t.limits.memMB))
			return out
		}
		out.output = appendJSONString(make([]byte, 0, n), data)
		return out
	}
	if len(data) == 0 {
		out.output = []byte("null") // Kindgi: an empty body parses to null
		return out
	}
	if !json.Valid(data) {
		var v any
		msg := "the response body was not valid JSON (spec.parseJson is true)"
		if err := json.Unmarshal(data, &v); err != nil {
			msg += ": " + err.Error()
		}
		out.err = &toolerr.Error{Code: toolerr.HandlerError, Message: msg, Details: map[string]any{"status": resp.Status}}
		return out
	}
	out.output = data
	return out
}

// expandError maps a urlTemplate that the input cannot fill. When some
// input valid against the tool's schema would have filled it, the input is
// at fault: input-validation-failed with an Ajv-shaped issue, before any
// request (as for every other input and needs check). When none could —
// the template names a key the input schema forbids — the tool's own
// definition is broken and no caller can fix it: handler-error, as Kindgi
// answers for every unfillable placeholder.
func (s *httpSpec) expandError(err error) error {
	var he *headerValueError
	if errors.As(err, &he) {
		te := toolerr.New(toolerr.InputValidationFailed, "%v", err)
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(he.param), SchemaPath: he.schemaPath, Keyword: "headerValue",
			Params: map[string]any{"placeholder": he.param, "header": he.header}, Message: "must be valid in a header value: it " + he.reason}}
		return te
	}
	var se *segmentError
	if errors.As(err, &se) {
		te := toolerr.New(toolerr.InputValidationFailed, "%v", err)
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(se.param), SchemaPath: "#/spec/urlTemplate", Keyword: "pathSegment",
			Params: map[string]any{"placeholder": se.param}, Message: "must fill exactly one path segment: it " + se.reason}}
		return te
	}
	var fe *fillError
	if !errors.As(err, &fe) {
		return toolerr.New(toolerr.InputValidationFailed, "%v", err)
	}
	if s.unfillable[fe.param] {
		return toolerr.New(toolerr.HandlerError, "%s, and the tool's input schema does not admit that key", fe.msg)
	}
	te := toolerr.New(toolerr.InputValidationFailed, "%s", fe.msg)
	sp := fe.schemaPath
	if sp == "" {
		sp = "#/spec/urlTemplate"
	}
	if fe.missing {
		te.Issues = []toolerr.Issue{{InstancePath: "", SchemaPath: sp, Keyword: "required",
			Params: map[string]any{"missingProperty": fe.param}, Message: "must have required property '" + fe.param + "'"}}
	} else {
		te.Issues = []toolerr.Issue{{InstancePath: "/" + escapePointer(fe.param), SchemaPath: sp, Keyword: "type",
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
