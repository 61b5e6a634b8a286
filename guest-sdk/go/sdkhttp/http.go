package sdkhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Transport is an http.RoundTripper over sandboxd's HTTP import
// (http_request and friends), so handlers use net/http unchanged:
//
//	client := &http.Client{Transport: sdkhttp.Transport{}}
//	resp, err := client.Get("https://api.example.com/v1/items")
//
// The host enforces the tool's network policy, follows redirects itself
// (re-checking each hop) and applies the invocation's budgets; a refused or
// failed request is an *sdk.HostError whose Errno says why (abi.ErrDenied,
// abi.ErrTimeout, abi.ErrBodyBudget, …). Request bodies are read fully
// before the request is sent. Outside Wasm (tests, sdk.Invoke) it uses
// http.DefaultTransport, without any policy.
//
// To send a secret the handler may not read (the strict posture), put
// SecretHeader(name) in a header value: the host substitutes the value for
// allowlisted destinations only.
type Transport struct{}

// SecretHeader returns the placeholder the host replaces with the value of
// the declared secret name in an outbound request header, e.g.
// req.Header.Set("Authorization", "Bearer "+sdkhttp.SecretHeader("API_TOKEN")).
func SecretHeader(name string) string { return "{{secret:" + name + "}}" }

// requestJSON is http_request's request description.
type requestJSON struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

func describe(req *http.Request) ([]byte, error) {
	hdr := make(map[string]string, len(req.Header))
	for k, vs := range req.Header {
		hdr[k] = strings.Join(vs, ", ")
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	return json.Marshal(requestJSON{Method: method, URL: req.URL.String(), Headers: hdr})
}

// parseHeaders turns http_headers_read's JSON object into an http.Header.
func parseHeaders(b []byte) (http.Header, int64) {
	var m map[string]string
	_ = json.Unmarshal(b, &m)
	h := make(http.Header, len(m))
	for k, v := range m {
		h.Set(k, v)
	}
	cl := int64(-1)
	if v := h.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			cl = n
		}
	}
	return h, cl
}
