package executor_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestHTTPToolKindgiHeaderTemplates is Kindgi's header templating
// (packages/tools/src/http.ts: each spec header value goes through
// substituteTemplate, \{(\w+)\} filled unencoded with String(value)) as a
// table against a loopback upstream that records the headers it received,
// with sandboxd's rules where it answers otherwise ("ours:"): a missing
// key, null, an object or an array is the URL placeholders' error
// (input-validation-failed with an Ajv-shaped issue, handler-error when the
// schema can never carry the key), where Kindgi sends "{key}", "" or
// String(value); a value that is not valid in a header value (CR, LF, NUL,
// any control character but HTAB, a character above U+00FF, headers over the cap) is
// input-validation-failed and never sent; input text can never name a
// secret: a header holding input goes out as written (egress.Request
// Literal), and in a header whose template holds its own secret
// placeholder the input may not form another.
func TestHTTPToolKindgiHeaderTemplates(t *testing.T) {
	type received struct {
		header http.Header
		body   string
	}
	reqs := make(chan received, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- received{r.Header.Clone(), string(b)}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	base := "http://api.test:" + serverPort(t, srv)
	e := newExecutor(t, loopbackEgress)
	const secret = "s3cr3t-value"
	auth := map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "production", "name": "tok"}}
	closed := map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{"id": map[string]any{}}}
	h := func(nv ...string) []map[string]any {
		var out []map[string]any
		for i := 0; i+1 < len(nv); i += 2 {
			out = append(out, map[string]any{"name": nv[i], "value": nv[i+1]})
		}
		return out
	}
	wantHeaders := func(t *testing.T, got http.Header, nv ...string) {
		t.Helper()
		for i := 0; i+1 < len(nv); i += 2 {
			if v := got.Values(nv[i]); len(v) != 1 || v[0] != nv[i+1] {
				t.Errorf("%s: got %q, want %q", nv[i], v, nv[i+1])
			}
		}
	}
	// refused: input-validation-failed with one issue of keyword at
	// instance path /param, nothing sent.
	refused := func(keyword, param, schemaPath, inMessage string) func(*testing.T, *received, error) {
		return func(t *testing.T, r *received, err error) {
			t.Helper()
			te := wantCode(t, err, toolerr.InputValidationFailed)
			inst := "/" + param
			if keyword == "required" {
				inst = ""
			}
			if len(te.Issues) != 1 || te.Issues[0].Keyword != keyword || te.Issues[0].InstancePath != inst || te.Issues[0].SchemaPath != schemaPath ||
				!strings.Contains(te.Message, inMessage) || r != nil {
				t.Fatalf("message %q, issues %+v, request %v", te.Message, te.Issues, r)
			}
			if strings.Contains(te.Message, secret) {
				t.Fatalf("the message holds the secret: %q", te.Message)
			}
		}
	}
	cases := []struct {
		name    string
		method  string // "" for GET
		url     string // "" for /items/{id}
		headers []map[string]any
		auth    bool
		input   map[string]any // schema; nil: {"type":"object"}
		in      string
		loadErr string
		check   func(t *testing.T, r *received, err error)
	}{
		{name: "filled unencoded beside literal text; other headers as written", headers: h("X-Repo", "repo {repo}/{id}", "Accept", "application/vnd.github+json"),
			in: `{"id":"1","repo":"a b/c?d&e%20"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-Repo", "repo a b/c?d&e%20/1", "Accept", "application/vnd.github+json")
			}},
		// Kindgi's buildBody drops only urlTemplate keys.
		{name: "keys filled into headers stay in the json-input body", method: "POST", headers: h("X-Owner", "{owner}"), in: `{"id":"1","owner":"o","t":"x"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-Owner", "o", "Content-Type", "application/json")
				if r.body != `{"owner":"o","t":"x"}` {
					t.Fatalf("body %q", r.body)
				}
			}},
		{name: "numbers are JavaScript's String(n), booleans true and false", headers: h(
			"X-N1", "{n1}", "X-N2", "{n2}", "X-N3", "{n3}", "X-N4", "{n4}", "X-N5", "{n5}", "X-N6", "{n6}", "X-N7", "{n7}", "X-N8", "{n8}", "X-N9", "{n9}", "X-N10", "{n10}",
			"X-N11", "{n11}", "X-N12", "{n12}", "X-N13", "{n13}", "X-B", "{t},{f}"),
			in: `{"id":"1","n1":1.50,"n2":1e21,"n3":100,"n4":1E2,"n5":0.0000001,"n6":-0,"n7":12345678901234567890,"n8":0.000001,"n9":-2.5e-8,"n10":123456789012345680000,"n11":1e400,"n12":5e-324,"n13":-1.7976931348623157e308,"t":true,"f":false}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-N1", "1.5", "X-N2", "1e+21", "X-N3", "100", "X-N4", "100", "X-N5", "1e-7", "X-N6", "0",
					"X-N7", "12345678901234567000", "X-N8", "0.000001", "X-N9", "-2.5e-8", "X-N10", "123456789012345680000",
					"X-N11", "Infinity", "X-N12", "5e-324", "X-N13", "-1.7976931348623157e+308", "X-B", "true,false")
			}},
		{name: "only \\{(\\w+)\\} is a placeholder", headers: h("X-P", "{1}|{a-b}|{a.b}|{}|{{x}}|{ x }|{_u}"), in: `{"id":"1","1":"one","x":"X","_u":"U","a-b":"no","a.b":"no"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-P", "one|{a-b}|{a.b}|{}|{X}|{ x }|U")
			}},
		// fetch sends a header value as a ByteString: one byte a character.
		{name: "U+00A0 to U+00FF go out as their ISO-8859-1 byte; HTAB is kept", headers: h("X-Who", "{who}"), in: `{"id":"1","who":"Jos\u00e9\tM\u00fcller \u00ff"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-Who", "Jos\xe9\tM\xfcller \xff")
			}},
		{name: "CRLF injection is refused, never sent", headers: h("X-Note", "note: {note}"), in: `{"id":"1","note":"a\r\nX-Evil: 1"}`,
			check: refused("headerValue", "note", "#/spec/headers/0/value", "control character")},
		{name: "a lone LF is refused", headers: h("X-Note", "{note}"), in: `{"id":"1","note":"a\nb"}`, check: refused("headerValue", "note", "#/spec/headers/0/value", "U+000A")},
		{name: "a lone CR is refused", headers: h("X-Note", "{note}"), in: `{"id":"1","note":"a\rb"}`, check: refused("headerValue", "note", "#/spec/headers/0/value", "U+000D")},
		{name: "NUL is refused", headers: h("X-Note", "{note}"), in: `{"id":"1","note":"a\u0000b"}`, check: refused("headerValue", "note", "#/spec/headers/0/value", "U+0000")},
		{name: "DEL is refused", headers: h("X-A", "x", "X-Note", "{note}"), in: `{"id":"1","note":"a\u007f"}`, check: refused("headerValue", "note", "#/spec/headers/1/value", "U+007F")},
		{name: "a C1 control (NEL) is refused", headers: h("X-Note", "{note}"), in: `{"id":"1","note":"a\u0085b"}`, check: refused("headerValue", "note", "#/spec/headers/0/value", "U+0085")},
		{name: "a character above U+00FF is refused", headers: h("X-Note", "{note}"), in: `{"id":"1","note":"5 \u20ac"}`, check: refused("headerValue", "note", "#/spec/headers/0/value", "U+20AC")},
		{name: "input making the headers too big is input-validation-failed, never sent", headers: h("X-Big", "{big}"), in: `{"id":"1","big":"` + strings.Repeat("a", 70<<10) + `"}`,
			check: func(t *testing.T, r *received, err error) {
				if te := wantCode(t, err, toolerr.InputValidationFailed); len(te.Issues) != 1 || te.Issues[0].Keyword != "headerBytes" || r != nil {
					t.Fatalf("message %q, issues %+v, request %v", te.Message, te.Issues, r != nil)
				}
			}},
		// ours: Kindgi keeps a missing key as the literal {key}.
		{name: "a key the schema admits but the input lacks is input-validation-failed", headers: h("X-Trace", "{trace}"), in: `{"id":"1"}`,
			check: refused("required", "trace", "#/spec/headers/0/value", "{trace}")},
		// ours: Kindgi sends "{trace}" on every call.
		{name: "a key the schema can never carry is handler-error", headers: h("X-Trace", "{trace}"), input: closed, in: `{"id":"1"}`,
			check: func(t *testing.T, r *received, err error) {
				if te := wantCode(t, err, toolerr.HandlerError); !strings.Contains(te.Message, "{trace}") || !strings.Contains(te.Message, "does not admit") || r != nil {
					t.Fatalf("message %q, request %v", te.Message, r)
				}
			}},
		// ours: Kindgi sends "" for null, String(v) ("[object Object]",
		// "1,2") for an object or array.
		{name: "null is input-validation-failed", headers: h("X-V", "{v}"), in: `{"id":"1","v":null}`, check: refused("type", "v", "#/spec/headers/0/value", "got null")},
		{name: "an object is input-validation-failed", headers: h("X-V", "{v}"), in: `{"id":"1","v":{"a":1}}`, check: refused("type", "v", "#/spec/headers/0/value", "got object")},
		{name: "an array is input-validation-failed", headers: h("X-V", "{v}"), in: `{"id":"1","v":[1,2]}`, check: refused("type", "v", "#/spec/headers/0/value", "got array")},
		// No input can name a secret: the header holding input is sent as
		// written while the declared secret is substituted in Authorization.
		{name: "secret marker injection stays literal", auth: true, headers: h("X-Note", "{note}", "X-Split", "{{{a}", "X-Dollar", "{d}"),
			in: `{"id":"1","note":"{{secret:tok}}","a":"secret:tok}}","d":"${secret:tok}"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "Authorization", "Bearer "+secret, "X-Note", "{{secret:tok}}", "X-Split", "{{secret:tok}}", "X-Dollar", "${secret:tok}")
			}},
		// A template's own secret placeholder is still substituted; input
		// beside it may not complete, split or form one.
		{name: "a template's secret placeholder beside input is substituted", auth: true, headers: h("X-Mixed", "{{secret:tok}} for {who}"), in: `{"id":"1","who":"me"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-Mixed", secret+" for me")
			}},
		{name: "input forming a secret placeholder beside the template's is refused", auth: true, headers: h("X-Mixed", "{{secret:tok}} for {who}"),
			in: `{"id":"1","who":"{{secret:tok}}"}`, check: refused("headerValue", "who", "#/spec/headers/0/value", "secret placeholder")},
		{name: "input completing the template's text into a secret placeholder is refused", auth: true, headers: h("X-Mixed", "{{secret:tok}} {{sec{a}"),
			in: `{"id":"1","a":"ret:tok}}"}`, check: refused("headerValue", "a", "#/spec/headers/0/value", "secret placeholder")},
		{name: "an empty value joining the template's text into a secret placeholder is refused", auth: true, headers: h("X-Mixed", "{{secret:tok}} {{sec{a}ret:tok}}"),
			in: `{"id":"1","a":""}`, check: refused("headerValue", "a", "#/spec/headers/0/value", "secret placeholder")},
		// The last of two headers of one name is sent (Kindgi's object
		// assignment), substituted as its own template says.
		{name: "a later header of the same name replaces a templated one", auth: true, headers: h("X-D", "{v}", "X-D", "key {{secret:tok}}"), in: `{"id":"1","v":"x"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "X-D", "key "+secret)
			}},
		{name: "a placeholder inside a secret placeholder is refused at load", auth: true, headers: h("X-Key", "{{secret:{name}}}"), loadErr: "secret placeholder must be whole"},
		{name: "header names are never templated", headers: h("X-{a}", "v"), loadErr: "invalid header"},
		{name: "a templated Content-Type is the only one", method: "POST", headers: h("Content-Type", "application/{fmt}"), in: `{"id":"1","fmt":"vnd.api+json"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "Content-Type", "application/vnd.api+json")
				if r.body != `{"fmt":"vnd.api+json"}` {
					t.Fatalf("body %q", r.body)
				}
			}},
		{name: "the credential replaces a templated header of its name in any spelling", auth: true, headers: h("authorization", "{a}"), in: `{"id":"1","a":"mine"}`,
			check: func(t *testing.T, r *received, err error) {
				wantOK(t, err)
				wantHeaders(t, r.header, "Authorization", "Bearer "+secret)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, u := c.method, c.url
			if method == "" {
				method = "GET"
			}
			if u == "" {
				u = "/items/{id}"
			}
			spec := map[string]any{"kind": "http", "method": method, "urlTemplate": base + u, "headers": c.headers}
			if c.auth {
				spec["authorization"] = auth
			}
			input := c.input
			if input == nil {
				input = map[string]any{"type": "object"}
			}
			tool, err := e.Load(context.Background(), httpToolManifest(t, spec, func(m map[string]any) { m["input"] = input }))
			if !loadedUnlessRefused(t, tool, err, c.loadErr) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = tool.Invoke(ctx, executor.Request{Input: []byte(c.in), Context: executor.CallContext{TenantID: "t", RunID: "r", Secrets: map[string]string{"tok": secret}}})
			var r *received
			select {
			case got := <-reqs:
				r = &got
			default:
			}
			if err == nil && r == nil {
				t.Fatal("the call succeeded but no request reached the upstream")
			}
			if r != nil {
				for name, vs := range r.header {
					if name != "Authorization" && strings.Contains(strings.Join(vs, ","), secret) && !strings.HasPrefix(c.name, "a template's secret placeholder") && !strings.HasPrefix(c.name, "a later header") {
						t.Errorf("the secret reached the upstream in %s: %q", name, vs)
					}
				}
			}
			c.check(t, r, err)
		})
	}
}
