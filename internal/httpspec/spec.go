package httpspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// defaultTimeout is a declarative HTTP tool's request timeout when its
// spec sets no timeoutMs (Kindgi HttpToolSpec).
const defaultTimeout = 30 * time.Second

// Spec is a compiled spec.kind "http". The exported fields are what the
// request is sent with; the templates fill through URL, Headers and Body.
type Spec struct {
	Method     string
	AuthHeader string // header carrying the secret, "" for none
	AuthPrefix string // "Bearer " for bearer auth
	AuthSecret string // secretRef.name
	Timeout    time.Duration
	ParseJSON  bool
	OKMin      int // successStatus
	OKMax      int
	// Policy is the tool's network policy; with no network in the
	// manifest, the one-entry allowlist of the urlTemplate's origin.
	Policy *egress.Policy

	tmpl urlTemplate
	// unfillable holds the placeholders the input schema can never carry
	// (not in its properties, additionalProperties false): a template
	// naming one is a broken tool, not a bad input.
	unfillable map[string]bool
	headers    []headerTemplate
	bodyKind   string // "", json-input, input-passthrough, text
	text       textTemplate
}

// URL fills the urlTemplate from the input object (see urlTemplate.expand).
// tick (nil: none) is called at least every 64 KiB of work: it may panic
// to stop the fill (the panic passes through URL).
func (s *Spec) URL(input map[string]any, tick func()) (string, error) {
	return s.tmpl.expand(input, &ticker{tick: tick})
}

// Unfillable reports whether no input valid against the tool's input
// schema can carry placeholder param: a template naming it is a broken
// tool, not a bad input.
func (s *Spec) Unfillable(param string) bool { return s.unfillable[param] }

type specJSON struct {
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

// Compile checks a spec.kind "http" at load: the URL template (a
// placeholder only in the path or query), the headers, the authorization
// and the network policy (pol, compiled from the manifest), which must admit
// the template's origin. With no network in the manifest the tool may reach
// only that origin: spec.policy is then that one-entry allowlist.
func Compile(m *manifest.Manifest, pol *egress.Policy) (*Spec, error) {
	var sj specJSON
	if err := json.Unmarshal(m.Spec, &sj); err != nil {
		return nil, specErr("%v", err)
	}
	if sj.Kind != "http" {
		return nil, toolerr.New(toolerr.LevelNotSupported, "spec.kind %q is not supported (only \"http\")", sj.Kind)
	}
	s := &Spec{Method: sj.Method, Timeout: defaultTimeout, ParseJSON: true, OKMin: 200, OKMax: 299}
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
		s.AuthSecret = a.SecretRef.Name
		switch a.Kind {
		case "bearer":
			s.AuthHeader, s.AuthPrefix = "Authorization", "Bearer "
		case "header":
			if !isHeaderToken(a.HeaderName) {
				return nil, specErr("authorization.headerName %q is not a header name", a.HeaderName)
			}
			s.AuthHeader = a.HeaderName
		default:
			return nil, specErr("authorization.kind %q is not bearer or header", a.Kind)
		}
		if strings.ContainsAny(s.AuthSecret, "{}") {
			return nil, specErr("authorization.secretRef.name %q is not a secret name", s.AuthSecret)
		}
	}
	if b := sj.RequestBody; b != nil {
		s.bodyKind = b.Kind
		if b.Kind == "text" {
			s.text = parseTextTemplate(b.Template)
		}
	}
	if sj.TimeoutMs != nil {
		s.Timeout = time.Duration(*sj.TimeoutMs) * time.Millisecond
	}
	if sj.ParseJSON != nil {
		s.ParseJSON = *sj.ParseJSON
	}
	if ss := sj.SuccessStatus; ss != nil {
		if ss.Min > ss.Max {
			return nil, specErr("successStatus.min %d is over max %d", ss.Min, ss.Max)
		}
		s.OKMin, s.OKMax = ss.Min, ss.Max
	}
	if m.Network == nil {
		entry := origin.Scheme + "://" + origin.Host.String() + ":" + strconv.Itoa(origin.Port)
		s.Policy, err = egress.ParsePolicy("allowlist", []string{entry})
		if err != nil {
			return nil, err
		}
	} else {
		s.Policy = pol
	}
	if _, ok := s.Policy.Match(origin); !ok {
		return nil, toolerr.New(toolerr.InvalidToolDefinition, "spec.urlTemplate's origin %s is not admitted by the tool's network policy", origin)
	}
	if s.AuthHeader != "" && s.Policy.Kind() != egress.KindAllowlist {
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
// Of two headers of one name the later decides, as in the map. tick is
// called as URL's.
func (s *Spec) Headers(in map[string]any, tick func()) (hdr map[string]string, literal map[string]bool, holdsInput bool, err error) {
	hdr = make(map[string]string, len(s.headers)+2)
	tk := &ticker{tick: tick}
	for _, h := range s.headers {
		v, err := h.fill(in, tk)
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

// HeaderBytesError is input-validation-failed when headers filled from the
// input are over egress's request header cap (limit, 0 for its default),
// counted as egress counts them; nothing is sent then.
func HeaderBytesError(hdr map[string]string, limit int) error {
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

// Body is what a declarative HTTP tool sends, by Kindgi's rules
// (packages/tools/src/http.ts buildBody): a GET without requestBody sends
// nothing; any other method without requestBody, and "json-input", send
// the JSON of the input object minus the keys the urlTemplate's
// placeholders consumed (in the input's order) as application/json, or
// nothing (no Content-Type) when no key is left; "input-passthrough" sends
// the whole input as application/json; "text" sends the template filled
// without encoding as text/plain. raw is the validated input, in its
// decoded form. The building is metered by m (see Meter): a meter point at
// least every 64 KiB of work, the body's growth charged as it grows.
func (s *Spec) Body(raw []byte, in map[string]any, m Meter) (body []byte, contentType string, err error) {
	switch s.bodyKind {
	case "":
		if s.Method == "GET" {
			return nil, "", nil
		}
		fallthrough
	case "json-input":
		consumed := make(map[string]bool, len(s.tmpl.params))
		for _, p := range s.tmpl.params {
			consumed[p] = true
		}
		body, err := jsonObjectWithout(raw, consumed, m)
		if err != nil {
			return nil, "", err
		}
		if body == nil {
			return nil, "", nil
		}
		return body, "application/json", nil
	case "input-passthrough":
		body, err := compactJSON(raw, m)
		if err != nil {
			return nil, "", err
		}
		return body, "application/json", nil
	case "text":
		body, err := s.text.fill(in, m)
		if err != nil {
			return nil, "", err
		}
		return body, "text/plain", nil
	}
	return nil, "", fmt.Errorf("spec.requestBody.kind %q is not json-input, input-passthrough or text", s.bodyKind)
}

// setsHeader reports whether the spec's headers set name (compared without
// case: Kindgi compares the exact spelling "Content-Type", but a request
// must never carry two Content-Types).
func (s *Spec) SetsHeader(name string) bool {
	for _, h := range s.headers {
		if strings.EqualFold(h.name, name) {
			return true
		}
	}
	return false
}
