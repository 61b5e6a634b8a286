// http_fetch_reactor is a Go SDK handler built as a reactor that fetches
// JSON over net/http through sdkhttp.Transport (sandboxd's HTTP import).
//
// Input: {"url": "...", "method"?: "GET", "body"?: "...", "headers"?: {...}}.
// Output: {"status": N, "contentType": "...", "json": <the response body>}.
// With {"secret": "NAME"} instead it reads the secret with secret_get and
// outputs {"secret": value} (a test of secret_get, not a pattern to copy).
// A failed request is a handler error whose code is "egress-" + the ABI
// error name ("egress-denied", "egress-timeout", ...).
package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/abi"
	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
	"github.com/sandboxd/sandboxd/guest-sdk/go/sdkhttp"
)

type input struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
	Secret  string            `json:"secret"`
}

type output struct {
	Status      int             `json:"status"`
	ContentType string          `json:"contentType"`
	JSON        json.RawMessage `json:"json,omitempty"`
	Secret      string          `json:"secret,omitempty"`
}

var client = &http.Client{Transport: sdkhttp.Transport{}}

func fetch(c *sdk.Context, in input) (*output, error) {
	if in.Secret != "" {
		v, err := c.Secret(in.Secret)
		if err != nil {
			return nil, egressError(err)
		}
		return &output{Secret: v}, nil
	}
	method := in.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if in.Body != "" {
		body = strings.NewReader(in.Body)
	}
	req, err := http.NewRequest(method, in.URL, body)
	if err != nil {
		return nil, &sdk.Error{Code: "bad-url", Message: err.Error()}
	}
	for k, v := range in.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, egressError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, egressError(err)
	}
	if !json.Valid(b) {
		return nil, &sdk.Error{Code: "not-json", Message: "the response is not JSON"}
	}
	return &output{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), JSON: b}, nil
}

func egressError(err error) error {
	var he *sdk.HostError
	if errors.As(err, &he) {
		return &sdk.Error{Code: "egress-" + abi.Errno(he.Errno).String(), Message: he.Message}
	}
	return &sdk.Error{Code: "egress-failed", Message: err.Error()}
}

func init() { sdk.Handle(fetch) }

func main() { sdk.Main() }
