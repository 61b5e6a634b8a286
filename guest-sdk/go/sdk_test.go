package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/abi"
)

type echoIn struct {
	Message string `json:"message"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

// register installs fn as the handler for the duration of the test.
func register[In, Out any](t *testing.T, fn func(*Context, In) (Out, error)) {
	t.Helper()
	registered = nil
	Handle(fn)
	t.Cleanup(func() { registered = nil })
}

func echo(_ *Context, in echoIn) (echoOut, error) { return echoOut{Echo: in.Message}, nil }

// fakeHost records what a reactor handle does with the host.
type fakeHost struct {
	*memHost
	in           []byte
	inErr        error
	out          []byte
	outErr       error
	errs         [][]byte // every error_set payload
	errSetFails  int      // refuse this many error_set calls
	contextReads int
	logs         bytes.Buffer
}

func newFakeHost(in, ctx string) *fakeHost {
	f := &fakeHost{in: []byte(in)}
	f.memHost = newMemHost(json.RawMessage(ctx), &f.logs)
	return f
}

func (f *fakeHost) input() ([]byte, error) { return f.in, f.inErr }

func (f *fakeHost) context() ([]byte, error) {
	f.contextReads++
	return f.memHost.context()
}

func (f *fakeHost) setOutput(b []byte) error {
	if f.outErr != nil {
		return f.outErr
	}
	f.out = b
	return nil
}

func (f *fakeHost) setError(b []byte) error {
	f.errs = append(f.errs, b)
	if f.errSetFails > 0 {
		f.errSetFails--
		return &HostError{Errno: int32(abi.ErrTooLarge), Message: "error over 64 KiB"}
	}
	return nil
}

func TestInvoke(t *testing.T) {
	register(t, echo)
	out, err := Invoke([]byte(`{"message":"hi"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"echo":"hi"}`; got != want {
		t.Errorf("output = %s, want %s", got, want)
	}
}

func TestInvokeErrors(t *testing.T) {
	declaredErr := &Error{Code: "not-found", Message: "no such item"}
	tests := []struct {
		name  string
		input string
		fn    func(*Context, echoIn) (echoOut, error)
		check func(t *testing.T, err error)
	}{
		{"handler error is returned as is", `{}`,
			func(*Context, echoIn) (echoOut, error) { return echoOut{}, fmt.Errorf("wrapped: %w", declaredErr) },
			func(t *testing.T, err error) {
				var e *Error
				if !errors.As(err, &e) || e != declaredErr {
					t.Errorf("err = %v, want it to wrap the declared *Error", err)
				}
			}},
		{"input that does not decode", `{"message":7}`, echo,
			func(t *testing.T, err error) {
				var je *json.UnmarshalTypeError
				if !errors.As(err, &je) || !strings.HasPrefix(err.Error(), "sdk: decoding input:") {
					t.Errorf("err = %v, want a wrapped *json.UnmarshalTypeError", err)
				}
			}},
		{"input that is not JSON", `nope`, echo,
			func(t *testing.T, err error) {
				if err == nil || !strings.HasPrefix(err.Error(), "sdk: decoding input:") {
					t.Errorf("err = %v, want a decoding error", err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			register(t, tc.fn)
			out, err := Invoke([]byte(tc.input), nil)
			if out != nil {
				t.Errorf("output = %s, want none", out)
			}
			tc.check(t, err)
		})
	}
}

func TestInvokeOutputThatDoesNotEncode(t *testing.T) {
	register(t, func(*Context, echoIn) (map[string]any, error) { return map[string]any{"f": func() {}}, nil })
	if _, err := Invoke([]byte(`{}`), nil); err == nil || !strings.HasPrefix(err.Error(), "sdk: encoding output:") {
		t.Errorf("err = %v, want an encoding error", err)
	}
}

func TestInvokeWithoutHandler(t *testing.T) {
	registered = nil
	if _, err := Invoke([]byte(`{}`), nil); !errors.Is(err, ErrNoHandler) {
		t.Errorf("err = %v, want ErrNoHandler", err)
	}
}

func TestHandlePanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	register(t, echo)
	mustPanic("second Handle", func() { Handle(echo) })
	registered = nil
	mustPanic("Handle(nil)", func() { Handle[echoIn, echoOut](nil) })
}

func TestRawJSONHandler(t *testing.T) {
	register(t, func(_ *Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	out, err := Invoke([]byte(`[1, {"a": null}]`), nil)
	if err != nil || string(out) != `[1,{"a":null}]` {
		t.Errorf("Invoke = %s, %v; want the input back, compacted", out, err)
	}
}

func TestHandle(t *testing.T) {
	tests := []struct {
		name        string
		fn          func(*Context, echoIn) (echoOut, error)
		input       string
		inErr       error
		outErr      error
		errSetFails int
		wantRet     int32
		wantOut     string
		wantErrs    []string // every error_set payload, in order
	}{
		{name: "success", fn: echo, input: `{"message":"hi"}`,
			wantRet: 0, wantOut: `{"echo":"hi"}`},
		{name: "declared error with details", input: `{}`,
			fn: func(*Context, echoIn) (echoOut, error) {
				return echoOut{}, fmt.Errorf("lookup: %w", &Error{Code: "not-found", Message: "no such item", Details: map[string]any{"id": 7}})
			},
			wantRet: 1, wantErrs: []string{`{"code":"not-found","message":"no such item","details":{"id":7}}`}},
		{name: "declared error without code", input: `{}`,
			fn:      func(*Context, echoIn) (echoOut, error) { return echoOut{}, &Error{Message: "bad"} },
			wantRet: 1, wantErrs: []string{`{"code":"handler-error","message":"bad"}`}},
		{name: "plain error", input: `{}`,
			fn:      func(*Context, echoIn) (echoOut, error) { return echoOut{}, errors.New("something broke") },
			wantRet: 1, wantErrs: []string{`{"code":"handler-error","message":"something broke"}`}},
		{name: "input_read fails", fn: echo, inErr: &HostError{Errno: -7, Message: "outside an invocation"},
			wantRet: 1, wantErrs: []string{`{"code":"handler-error","message":"sdk: reading input: sandboxd_v1: no-invocation (-7): outside an invocation"}`}},
		{name: "output_set refuses", fn: echo, input: `{}`, outErr: &HostError{Errno: -5, Message: "output over the cap"},
			wantRet: 1, wantErrs: []string{`{"code":"handler-error","message":"sdk: setting output: sandboxd_v1: too-large (-5): output over the cap"}`}},
		{name: "details that do not encode", input: `{}`,
			fn: func(*Context, echoIn) (echoOut, error) {
				return echoOut{}, &Error{Code: "c", Message: "m", Details: map[string]any{"ch": make(chan int)}}
			},
			wantRet: 1, wantErrs: []string{`{"code":"c","message":"m"}`}},
		{name: "error_set refuses the first payload", input: `{}`, errSetFails: 1,
			fn: func(*Context, echoIn) (echoOut, error) {
				return echoOut{}, &Error{Code: "c", Message: strings.Repeat("é", 3000), Details: map[string]any{"k": 1}}
			},
			wantRet: 1, wantErrs: []string{
				`{"code":"c","message":"` + strings.Repeat("é", 3000) + `","details":{"k":1}}`,
				`{"code":"c","message":"` + strings.Repeat("é", 2048) + `"}`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			register(t, tc.fn)
			h := newFakeHost(tc.input, `{}`)
			h.inErr, h.outErr, h.errSetFails = tc.inErr, tc.outErr, tc.errSetFails
			if got := handleWith(h); got != tc.wantRet {
				t.Errorf("handle = %d, want %d", got, tc.wantRet)
			}
			if string(h.out) != tc.wantOut {
				t.Errorf("output = %s, want %s", h.out, tc.wantOut)
			}
			if len(h.errs) != len(tc.wantErrs) {
				t.Fatalf("error_set called %d times, want %d", len(h.errs), len(tc.wantErrs))
			}
			for i, want := range tc.wantErrs {
				if string(h.errs[i]) != want {
					t.Errorf("error_set #%d = %s\nwant %s", i+1, h.errs[i], want)
				}
			}
		})
	}
}

func TestHandleInputThatDoesNotDecode(t *testing.T) {
	register(t, echo)
	h := newFakeHost(`{"message":false}`, `{}`)
	if got := handleWith(h); got != 1 {
		t.Errorf("handle = %d, want 1", got)
	}
	var e Error
	if len(h.errs) != 1 || json.Unmarshal(h.errs[0], &e) != nil ||
		e.Code != CodeHandlerError || !strings.HasPrefix(e.Message, "sdk: decoding input: json: ") {
		t.Errorf("error_set = %q, want one handler-error about decoding the input", h.errs)
	}
	if h.out != nil {
		t.Errorf("output = %s, want none", h.out)
	}
}

func TestHandleWithoutHandler(t *testing.T) {
	registered = nil
	h := newFakeHost(`{}`, `{}`)
	if got := handleWith(h); got != 1 {
		t.Errorf("handle = %d, want 1", got)
	}
	want := `{"code":"handler-error","message":"` + ErrNoHandler.Error() + `"}`
	if len(h.errs) != 1 || string(h.errs[0]) != want {
		t.Errorf("error_set = %q, want %s", h.errs, want)
	}
}

const testCtx = `{"tenantId":"t-1","runId":"r-1","requestId":"q-1","orgId":"o-1",
	"env":{"REGION":"eu","PORT":8080},
	"secrets":{"API_KEY":"s3cret"},
	"config":{"limits":{"max":5}}}`

func TestContext(t *testing.T) {
	h := newFakeHost(`{}`, testCtx)
	c := &Context{h: h}
	if got := c.TenantID(); got != "t-1" {
		t.Errorf("TenantID = %q", got)
	}
	if got := c.RunID(); got != "r-1" {
		t.Errorf("RunID = %q", got)
	}
	if got := c.RequestID(); got != "q-1" {
		t.Errorf("RequestID = %q", got)
	}
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{{"REGION", "eu", true}, {"PORT", "8080", true}, {"HOME", "", false}} {
		if got, ok := c.Env(tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("Env(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	var raw map[string]any
	if err := json.Unmarshal(c.Raw(), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["secrets"]; ok {
		t.Error("Raw() contains secrets")
	}
	if _, ok := raw["config"]; ok {
		t.Error("Raw() contains config")
	}
	if raw["orgId"] != "o-1" {
		t.Errorf("Raw()[orgId] = %v, want o-1", raw["orgId"])
	}
	if h.contextReads != 1 {
		t.Errorf("context_read called %d times, want 1", h.contextReads)
	}
}

func TestContextReadFails(t *testing.T) {
	c := &Context{h: failingContextHost{newMemHost(nil, nil)}}
	if c.Raw() != nil || c.TenantID() != "" {
		t.Errorf("Raw() = %s, TenantID() = %q; want both empty", c.Raw(), c.TenantID())
	}
	if _, ok := c.Env("X"); ok {
		t.Error("Env found a variable in a context that could not be read")
	}
}

type failingContextHost struct{ *memHost }

func (failingContextHost) context() ([]byte, error) { return nil, &HostError{Errno: -7} }

func TestConfigAndSecret(t *testing.T) {
	c := &Context{h: newMemHost(json.RawMessage(testCtx), nil)}
	var lim struct{ Max int }
	if err := c.Config("limits", &lim); err != nil || lim.Max != 5 {
		t.Errorf("Config(limits) = %+v, %v; want {Max:5}, nil", lim, err)
	}
	if err := c.Config("limits", new(string)); err == nil {
		t.Error("Config into a mismatched type succeeded")
	}
	err := c.Config("missing", &lim)
	var he *HostError
	if !errors.Is(err, abi.ErrNotFound) || !errors.As(err, &he) || he.Errno != -2 {
		t.Errorf("Config(missing) = %v, want a *HostError matching abi.ErrNotFound", err)
	}
	if s, err := c.Secret("API_KEY"); s != "s3cret" || err != nil {
		t.Errorf("Secret(API_KEY) = %q, %v", s, err)
	}
	if _, err := c.Secret("OTHER"); !errors.Is(err, abi.ErrNotFound) || errors.Is(err, abi.ErrDenied) {
		t.Errorf("Secret(OTHER) = %v, want a not-found HostError", err)
	}
}

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	c := &Context{h: newMemHost(nil, &buf)}
	c.Debug("d")
	c.Info("i")
	c.Warn("w")
	c.Error("e")
	c.Log(Level(9), "x")
	want := "debug: d\ninfo: i\nwarn: w\nerror: e\nlevel(9): x\n"
	if buf.String() != want {
		t.Errorf("log =\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestHostError(t *testing.T) {
	err := fmt.Errorf("call: %w", &HostError{Errno: -1, Message: "network denied"})
	if got, want := err.Error(), "call: sandboxd_v1: denied (-1): network denied"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, abi.ErrDenied) || errors.Is(err, abi.ErrNotFound) {
		t.Error("errors.Is does not match the errno exactly")
	}
	if got, want := (&HostError{Errno: -99}).Error(), "sandboxd_v1: errno(-99) (-99)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestErrorText(t *testing.T) {
	if got := (&Error{Code: "not-found", Message: "no such item"}).Error(); got != "not-found: no such item" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Message: "bad"}).Error(); got != "bad" {
		t.Errorf("Error() = %q", got)
	}
}

func TestMainCommand(t *testing.T) {
	register(t, func(c *Context, in echoIn) (echoOut, error) {
		if in.Message == "fail" {
			return echoOut{}, &Error{Code: "nope", Message: "asked to fail"}
		}
		return echoOut{Echo: in.Message + c.TenantID()}, nil
	})
	tests := []struct {
		stdin, wantOut, wantErr string
		wantCode                int
	}{
		{`{"message":"hi"}`, "{\"echo\":\"hi\"}\n", "", 0},
		{`{"message":"fail"}`, "", "nope: asked to fail\n", 1},
		{``, "", "sdk: decoding input: unexpected end of JSON input\n", 1},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := runMain(newMemHost(nil, &stderr), strings.NewReader(tc.stdin), &stdout, &stderr)
		if code != tc.wantCode || stdout.String() != tc.wantOut || stderr.String() != tc.wantErr {
			t.Errorf("stdin %q: exit %d, stdout %q, stderr %q; want %d, %q, %q",
				tc.stdin, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantOut, tc.wantErr)
		}
	}
}
