package executor_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// record runs one call of tool with a Recorder and returns the result, the
// recording's bytes and the error.
func record(t *testing.T, tool *executor.Tool, req executor.Request, opts executor.RecordOptions) (*executor.Result, []byte, error) {
	t.Helper()
	rec := executor.NewRecorder(opts)
	req.Record = rec
	if req.Context.TenantID == "" {
		req.Context = req.Context.WithDefaults("t1", "r1")
	}
	res, err := tool.Invoke(context.Background(), req)
	var buf bytes.Buffer
	if _, werr := rec.WriteTo(&buf); werr != nil {
		t.Fatalf("WriteTo: %v", werr)
	}
	return res, buf.Bytes(), err
}

func parseRecording(t *testing.T, b []byte) *executor.Recording {
	t.Helper()
	rec, err := executor.ReadRecording(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("ReadRecording: %v\n%s", err, b)
	}
	return rec
}

func replay(t *testing.T, tool *executor.Tool, b []byte) *executor.ReplayReport {
	t.Helper()
	rep, err := tool.Replay(context.Background(), parseRecording(t, b))
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return rep
}

func countFn(rec *executor.Recording, fn string) int {
	n := 0
	for _, c := range rec.Calls {
		if c.Fn == fn {
			n++
		}
	}
	return n
}

// A WAT reactor's clock reading and random bytes are recorded, and a
// replay on another executor gets the same output and fuel; another input
// makes it ask for 4 random bytes where 8 were recorded, and replay names
// that host call.
func TestRecordReplayClockRandom(t *testing.T) {
	tool := load(t, newExecutor(t), "replay_clock_random", nil)
	res, b, err := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := parseRecording(t, b)
	if len(rec.Calls) != 2 || rec.Calls[0].Fn != "clock" || rec.Calls[0].Clock != "realtime" || rec.Calls[1].Fn != "random" || len(rec.Calls[1].Bytes) != 8 {
		t.Fatalf("calls %s", b)
	}
	if rec.Trailer.Outcome != "result" || rec.Trailer.Fuel != res.Usage.Fuel || res.Usage.Fuel == 0 || !bytes.Equal(rec.Trailer.Output, res.Output) {
		t.Fatalf("trailer %+v, result %s fuel %d", rec.Trailer, res.Output, res.Usage.Fuel)
	}
	if rec.Header.ToolID != tool.ID() || rec.Header.ModuleDigest != tool.Digest() || rec.Header.ManifestDigest == "" || string(rec.Header.Input) != `{}` {
		t.Fatalf("header %+v", rec.Header)
	}

	// Another executor, a fresh tool: the same call.
	other := load(t, newExecutor(t), "replay_clock_random", nil)
	rep := replay(t, other, b)
	if !rep.Identical || rep.Err != nil || !bytes.Equal(rep.Result.Output, res.Output) || rep.Result.Usage.Fuel != res.Usage.Fuel {
		t.Fatalf("replay: %+v (divergence %q)", rep, rep.Divergence)
	}
	// Two recordings of the same call differ (the clock and the random
	// bytes are real), so the output is the replayed answers'.
	res2, _, _ := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{})
	if bytes.Equal(res2.Output, res.Output) {
		t.Fatalf("two recorded calls gave the same clock and random bytes: %s", res.Output)
	}

	// Another input: the guest asks for 4 random bytes.
	edited := bytes.Replace(b, []byte(`"input":{}`), []byte(`"input":{"a":1}`), 1)
	rep = replay(t, other, edited)
	if rep.Identical || rep.Divergence != "host call #2 (random_get #1): the guest asked random_get(4 bytes), recorded random_get(8 bytes)" {
		t.Fatalf("divergence %q", rep.Divergence)
	}

	// An input that is not compact JSON is kept byte for byte (the guest
	// sees its length: 3 bytes, so it asks for 4 random bytes).
	_, spaced, err := record(t, tool, executor.Request{Input: []byte("{}\n")}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := parseRecording(t, spaced).Header; h.Input != nil || string(h.InputBase64) != "{}\n" {
		t.Fatalf("header input %q base64 %q", h.Input, h.InputBase64)
	}
	if rep := replay(t, other, spaced); !rep.Identical {
		t.Fatalf("replay of a spaced input: %q", rep.Divergence)
	}

	// Answers within the cap, the output past it: the trailer has its
	// hash, and replay compares that.
	_, hashed, err := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{MaxBytes: 180})
	if err != nil {
		t.Fatal(err)
	}
	hrec := parseRecording(t, hashed)
	if hrec.Truncated != nil || hrec.Trailer.Output != nil || hrec.Trailer.OutputSha256 == "" {
		t.Fatalf("hash-only trailer: %s", hashed)
	}
	if rep := replay(t, other, hashed); !rep.Identical {
		t.Fatalf("replay against the output's hash: %q", rep.Divergence)
	}
	hrec.Calls[1].Bytes[0] ^= 0xff
	if rep, err := other.Replay(context.Background(), hrec); err != nil || !strings.Contains(rep.Divergence, "sha256") {
		t.Fatalf("edited answer against the output's hash: %v %q", err, rep.Divergence)
	}

	// A recorded answer changed: the output differs.
	rec.Calls[1].Bytes[0] ^= 0xff
	rep, err = other.Replay(context.Background(), rec)
	if err != nil || rep.Identical || !strings.HasPrefix(rep.Divergence, "output: replay ") {
		t.Fatalf("edited random bytes: %v %q", err, rep.Divergence)
	}
}

// Unusable files: truncated at the cap, cut before the trailer, not JSON,
// another version. Replay refuses each with an *UnusableError.
func TestRecordingUnusable(t *testing.T) {
	tool := load(t, newExecutor(t), "replay_clock_random", nil)
	_, b, err := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{MaxBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec := parseRecording(t, b)
	if rec.Truncated == nil || rec.Trailer == nil || len(rec.Calls) != 1 {
		t.Fatalf("truncated recording: %s", b)
	}
	if _, err := tool.Replay(context.Background(), rec); !executor.IsUnusable(err) || !strings.Contains(err.Error(), "truncated at host call #2") {
		t.Fatalf("replay of a truncated recording: %v", err)
	}

	_, good, _ := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{})
	lines := bytes.SplitAfter(bytes.TrimSpace(good), []byte("\n"))
	for name, bad := range map[string][]byte{
		"no trailer":      bytes.Join(lines[:len(lines)-1], nil),
		"not json":        append(append([]byte(nil), lines[0]...), []byte("{oops\n")...),
		"version 9":       bytes.Replace(good, []byte(`"version":1`), []byte(`"version":9`), 1),
		"empty":           nil,
		"not a recording": []byte(`{"kind":"result"}` + "\n"),
		"gap":             bytes.Replace(good, []byte(`"n":2`), []byte(`"n":3`), 1),
	} {
		if _, err := executor.ReadRecording(bytes.NewReader(bad)); !executor.IsUnusable(err) {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// upstream is a loopback server for replay_reactor: /first answers
// {"next":"/second"}, /second reflects the X-Key header.
func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/first":
			fmt.Fprint(w, `{"next":"/second","pad":"0123456789abcdef0123456789"}`)
		case "/second", "/secund":
			b, _ := json.Marshal(map[string]string{"path": r.URL.Path, "key": r.Header.Get("X-Key")})
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The case: a Go guest calls a loopback upstream twice and reads
// the clock and random bytes; with the upstream stopped, the replay is
// identical with the same fuel; a recorded response byte edited makes the
// second request differ, and replay names that host call. A secret
// substituted into a header and reflected by the upstream appears nowhere
// in the recording.
func TestRecordReplayHTTPGuest(t *testing.T) {
	const secret = "s3cr3t-Value-42"
	srv := upstream(t)
	port := serverPort(t, srv)
	edit := func(m map[string]any) {
		withNetwork("allowlist", "api.test:"+port)(m)
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"type": "string"}}}
	}
	tool := load(t, newExecutor(t, loopbackEgress), "replay_reactor", edit)
	input := fmt.Sprintf(`{"url":"http://api.test:%s/first","headers":{"X-Key":"{{secret:API_KEY}}"}}`, port)
	req := executor.Request{Input: []byte(input), Context: executor.CallContext{TenantID: "t1", RunID: "r1", Secrets: map[string]string{"API_KEY": secret}}}
	res, b, err := record(t, tool, req, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(secret)) || bytes.Contains(res.Output, []byte(secret)) {
		t.Fatalf("the secret is in the recording or the output:\n%s", b)
	}
	rec := parseRecording(t, b)
	if countFn(rec, "http_request") != 2 || countFn(rec, "clock") == 0 || countFn(rec, "random") == 0 {
		t.Fatalf("calls: %d http, %d clock, %d random", countFn(rec, "http_request"), countFn(rec, "clock"), countFn(rec, "random"))
	}
	if len(rec.Header.Secrets) != 1 || rec.Header.Secrets[0] != "API_KEY" {
		t.Fatalf("secrets %v", rec.Header.Secrets)
	}
	var httpCalls []*executor.RecordedCall
	for _, c := range rec.Calls {
		if c.Fn == "http_request" {
			httpCalls = append(httpCalls, c)
		}
	}
	if got := httpCalls[0].Request.Headers["X-Key"]; got != "{{secret:API_KEY}}" {
		t.Fatalf("recorded header %q", got)
	}
	if r := httpCalls[0].Response; r.Status != 200 || len(r.Reads) < 3 {
		t.Fatalf("first response %+v (16-byte reads expected)", r)
	}
	if !bytes.Contains(httpCalls[1].Response.Body, []byte("[REDACTED:API_KEY]")) {
		t.Fatalf("second response %s", httpCalls[1].Response.Body)
	}
	t.Logf("%d host calls, %d bytes, fuel %d", len(rec.Calls), len(b), rec.Trailer.Fuel)

	// Offline: the upstream is gone and the replaying executor may reach nothing.
	srv.Close()
	offline := load(t, newExecutor(t), "replay_reactor", edit)
	rep := replay(t, offline, b)
	if !rep.Identical || rep.Result == nil || rep.Result.Usage.Fuel != res.Usage.Fuel || !bytes.Equal(rep.Result.Output, res.Output) {
		t.Fatalf("offline replay: %q err %v", rep.Divergence, rep.Err)
	}

	// One byte of the first response edited: "/second" becomes "/secund".
	edited := bytes.Replace(b, []byte(b64(`{"next":"/second",`)), []byte(b64(`{"next":"/secund",`)), 1)
	if bytes.Equal(edited, b) {
		t.Fatal("the first response body was not found in the recording")
	}
	rep = replay(t, offline, edited)
	// The guest read the clock and random bytes before: the divergence
	// names the request by both numbers, its place in the one sequence and
	// its place among the HTTP exchanges.
	if httpCalls[1].N <= 2 {
		t.Fatalf("the second request is host call #%d: the guest was to read the clock and random bytes first", httpCalls[1].N)
	}
	want := fmt.Sprintf("host call #%d (http_request #2): the guest asked http_request GET http://api.test:%s/secund, recorded http_request GET http://api.test:%s/second", httpCalls[1].N, port, port)
	if rep.Identical || rep.Divergence != want {
		t.Fatalf("divergence %q\nwant %q", rep.Divergence, want)
	}
}

// b64 is the base64 of s, which must be a multiple of 3 bytes long so
// that it is a prefix of the encoding of anything s begins.
func b64(s string) string {
	if len(s)%3 != 0 {
		panic("b64: not a multiple of 3 bytes: " + s)
	}
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
}

// A guest that reads a secret with secret_get and outputs it: the
// recording holds the placeholder, and replay answers secret_get with it,
// so the output is the recorded one; the fuel is not, because the guest
// computed on a value of another length (docs/replay.md "Secrets").
func TestRecordSecretGet(t *testing.T) {
	const secret = "another-s3cret"
	edit := func(m map[string]any) {
		m["needsSpec"] = map[string]any{"secrets": map[string]any{"TOKEN": map[string]any{"type": "string", "minLength": 8}}}
	}
	tool := load(t, newExecutor(t), "http_fetch_reactor", edit)
	req := executor.Request{Input: []byte(`{"secret":"TOKEN"}`), Context: executor.CallContext{TenantID: "t1", RunID: "r1", Secrets: map[string]string{"TOKEN": secret}}}
	res, b, err := record(t, tool, req, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(res.Output, []byte(secret)) {
		t.Fatalf("output %s", res.Output)
	}
	if bytes.Contains(b, []byte(secret)) {
		t.Fatalf("the secret is in the recording:\n%s", b)
	}
	rec := parseRecording(t, b)
	if !bytes.Contains(rec.Trailer.Output, []byte(`{{secret:TOKEN}}`)) {
		t.Fatalf("recorded output %s", rec.Trailer.Output)
	}
	rep := replay(t, load(t, newExecutor(t), "http_fetch_reactor", edit), b)
	if rep.Err != nil || !bytes.Equal(rep.Result.Output, rec.Trailer.Output) || !strings.HasPrefix(rep.Divergence, "fuel: ") {
		t.Fatalf("replay: %q %v %s", rep.Divergence, rep.Err, rep.Result.Output)
	}
}

// WASI commands: a Go command (whose runtime reads clocks and random
// bytes) and a WAT one replay identically; another module diverges.
func TestRecordReplayCommand(t *testing.T) {
	for _, name := range []string{"echo_command", "go_echo_command"} {
		t.Run(name, func(t *testing.T) {
			tool := load(t, newExecutor(t), name, nil)
			res, b, err := record(t, tool, executor.Request{Input: []byte(`{"a":[1,2,3]}`)}, executor.RecordOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec := parseRecording(t, b)
			t.Logf("%d host calls, fuel %d", len(rec.Calls), res.Usage.Fuel)
			rep := replay(t, load(t, newExecutor(t), name, nil), b)
			if !rep.Identical || rep.Result.Usage.Fuel != res.Usage.Fuel {
				t.Fatalf("replay: %q %v", rep.Divergence, rep.Err)
			}
		})
	}
}

// Posture none reuses warm instances, but a recorded call gets one of its
// own, made in full: the answers its initialisation drew are in the
// recording, and the warm instance is not the recorded call's.
func TestRecordFreshInstance(t *testing.T) {
	tool := load(t, newExecutor(t), "counter", func(m map[string]any) { m["sandbox"] = "none" })
	for i := 1; i <= 2; i++ {
		res, err := invoke(t, tool, `{}`)
		if err != nil || string(res.Output) != fmt.Sprintf(`{"count":%d}`, i) {
			t.Fatalf("call %d: %s %v", i, res.Output, err)
		}
	}
	res, b, err := record(t, tool, executor.Request{Input: []byte(`{}`)}, executor.RecordOptions{})
	if err != nil || string(res.Output) != `{"count":1}` {
		t.Fatalf("recorded call: %s %v", res.Output, err)
	}
	if res, err := invoke(t, tool, `{}`); err != nil || string(res.Output) != `{"count":3}` {
		t.Fatalf("the warm instance after the recorded call: %s %v", res.Output, err)
	}
	if rep := replay(t, tool, b); !rep.Identical {
		t.Fatalf("replay: %q", rep.Divergence)
	}
}

// Extism plug-ins: the TinyGo http.wasm's exchange (through a loopback TLS
// server standing in for jsonplaceholder) replays on an executor that
// could reach nothing; config.wasm's config value comes from the header;
// count_vowels_std (a standard-Go _start plug-in, its runtime drawing
// clocks and random bytes) replays with the same fuel.
func TestRecordReplayExtism(t *testing.T) {
	httpWasm := extismPlugin(t, "http.wasm")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"userId": 1, "id": 1, "title": "delectus aut autem", "completed": false}`))
	}))
	defer srv.Close()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithEgressResolver(publicResolver{}).WithEgressDialer(dial).WithEgressTLS(&tls.Config{InsecureSkipVerify: true})
	})
	offline := newExecutor(t)
	allow := withNetwork("allowlist", "jsonplaceholder.typicode.com")
	tool := mustLoadExtism(t, e, httpWasm, "run_test", "context-isolated", allow)
	res, b, err := record(t, tool, executor.Request{Input: []byte(`""`)}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := parseRecording(t, b)
	if countFn(rec, "http_request") != 1 {
		t.Fatalf("recording:\n%s", b)
	}
	srv.Close()
	rep := replay(t, mustLoadExtism(t, offline, httpWasm, "run_test", "context-isolated", allow), b)
	if !rep.Identical || !bytes.Equal(rep.Result.Output, res.Output) {
		t.Fatalf("http.wasm replay: %q %v", rep.Divergence, rep.Err)
	}

	cfgWasm := extismPlugin(t, "config.wasm")
	tool = mustLoadExtism(t, offline, cfgWasm, "run_test", "context-isolated", withConfig("thing"))
	res, b, err = record(t, tool, executor.Request{Input: []byte(`""`), Context: rawConfig("thing", "hello")}, executor.RecordOptions{})
	if err != nil || !strings.Contains(string(res.Output), "hello") {
		t.Fatalf("config.wasm: %s %v", res.Output, err)
	}
	if rep := replay(t, tool, b); !rep.Identical {
		t.Fatalf("config.wasm replay: %q %v", rep.Divergence, rep.Err)
	}

	stdWasm := extismPlugin(t, "count_vowels_std.wasm")
	tool = mustLoadExtism(t, offline, stdWasm, "", "context-isolated", nil)
	res, b, err = record(t, tool, executor.Request{Input: []byte(`"hello world"`)}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep := replay(t, tool, b); !rep.Identical || rep.Result.Usage.Fuel != res.Usage.Fuel {
		t.Fatalf("count_vowels_std replay: %q %v", rep.Divergence, rep.Err)
	}
	t.Logf("count_vowels_std: %d host calls, fuel %d", len(parseRecording(t, b).Calls), res.Usage.Fuel)
}

// A declarative HTTP tool's exchange is recorded (its bearer token as the
// placeholder) and replayed with the upstream stopped; another input asks
// for another URL, and replay names the request.
func TestRecordReplayDeclarativeHTTP(t *testing.T) {
	const token = "decl-t0ken-9"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]string{"path": r.URL.Path, "auth": r.Header.Get("Authorization")})
		w.Write(b)
	}))
	port := serverPort(t, srv)
	spec := map[string]any{
		"kind": "http", "method": "GET", "urlTemplate": "http://api.test:" + port + "/users/{id}",
		"authorization": map[string]any{"kind": "bearer", "secretRef": map[string]any{"envName": "API_KEY", "name": "API_KEY"}},
	}
	tool := loadHTTPTool(t, newExecutor(t, loopbackEgress), spec, nil)
	cc := executor.CallContext{TenantID: "t", RunID: "r", Secrets: map[string]string{"API_KEY": token}}
	res, b, err := record(t, tool, executor.Request{Input: []byte(`{"id":"7"}`), Context: cc}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(token)) {
		t.Fatalf("the token is in the recording:\n%s", b)
	}
	rec := parseRecording(t, b)
	if len(rec.Calls) != 1 || rec.Calls[0].Fn != "http_request" || rec.Calls[0].Response == nil {
		t.Fatalf("recording:\n%s", b)
	}
	srv.Close()
	offline := loadHTTPTool(t, newExecutor(t), spec, nil)
	rep := replay(t, offline, b)
	if !rep.Identical || !bytes.Equal(rep.Result.Output, res.Output) {
		t.Fatalf("replay: %q %v", rep.Divergence, rep.Err)
	}
	rep = replay(t, offline, bytes.Replace(b, []byte(`"input":{"id":"7"}`), []byte(`"input":{"id":"8"}`), 1))
	want := "host call #1: the guest asked http_request GET http://api.test:" + port + "/users/8, recorded http_request GET http://api.test:" + port + "/users/7"
	if rep.Divergence != want {
		t.Fatalf("divergence %q\nwant %q", rep.Divergence, want)
	}
}

// The bytes a recording holds are charged to the call's memMB account: a
// 3 MB response recorded raises the call's peak by about its size.
func TestRecordChargedToCall(t *testing.T) {
	body := `{"data":"` + strings.Repeat("x", 3<<20) + `"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	tool := load(t, newExecutor(t, loopbackEgress), "http_fetch_reactor", withNetwork("allowlist", "api.test:"+port))
	input := fetchInput("http://api.test:"+port+"/", nil)
	plain, err := invoke(t, tool, input)
	if err != nil {
		t.Fatal(err)
	}
	recorded, _, err := record(t, tool, executor.Request{Input: []byte(input)}, executor.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peakMemMB %.2f unrecorded, %.2f recorded", plain.Usage.PeakMemMB, recorded.Usage.PeakMemMB)
	if recorded.Usage.PeakMemMB < plain.Usage.PeakMemMB+2.5 {
		t.Fatalf("peakMemMB %.2f recorded, %.2f unrecorded: the recording's 3 MB are not charged", recorded.Usage.PeakMemMB, plain.Usage.PeakMemMB)
	}
	// Under a cap smaller than the body the recording is truncated, and
	// the call still succeeds.
	res, b, err := record(t, tool, executor.Request{Input: []byte(input)}, executor.RecordOptions{MaxBytes: 1 << 20})
	if err != nil || !bytes.Equal(res.Output, plain.Output) {
		t.Fatalf("truncated recording's call: %v", err)
	}
	rec := parseRecording(t, b)
	if rec.Truncated == nil || len(b) > 2<<20 || rec.Trailer.Output != nil || rec.Trailer.OutputSha256 == "" || rec.Trailer.OutputBytes != len(res.Output) {
		t.Fatalf("a %d-byte recording under a 1 MiB cap, truncated %v, trailer output %d bytes", len(b), rec.Truncated, len(rec.Trailer.Output))
	}
}

// With Config.WithRecordable, a recorded call runs on a pooled, recycled
// or image-loaded instance like any call: the recording starts with the
// answers that made the instance's state (a Go runtime's start-up), and
// replays identically, with the same fuel, on an executor that is not
// recordable.
func TestRecordOnPooledInstances(t *testing.T) {
	fresh := load(t, newExecutor(t), "go_echo_reactor", nil)
	for _, recycle := range []bool{true, false} {
		t.Run(fmt.Sprintf("recycle=%v", recycle), func(t *testing.T) {
			e := newExecutor(t, func(c executor.Config) executor.Config {
				return c.WithRecordable(true).WithPoolSize(2).WithRecycling(recycle)
			})
			tool := load(t, e, "go_echo_reactor", nil)
			if _, err := invoke(t, tool, `{"warm":1}`); err != nil {
				t.Fatal(err)
			}
			acquired := map[executor.Acquisition]int{}
			for i := 0; i < 6; i++ {
				res, b, err := record(t, tool, executor.Request{Input: []byte(fmt.Sprintf(`{"i":%d}`, i))}, executor.RecordOptions{})
				if err != nil {
					t.Fatal(err)
				}
				acquired[res.Acquired]++
				rec := parseRecording(t, b)
				if countFn(rec, "random") == 0 {
					t.Fatalf("call %d (%s): no initialisation answers in\n%s", i, res.Acquired, b)
				}
				rep := replay(t, fresh, b)
				if !rep.Identical || rep.Result.Usage.Fuel != res.Usage.Fuel {
					t.Fatalf("call %d (%s): replay %q", i, res.Acquired, rep.Divergence)
				}
			}
			t.Logf("acquired %v, %+v", acquired, tool.Stats())
			if acquired[executor.AcquiredInstantiated] == 6 {
				t.Fatalf("every recorded call made an instance: %v", acquired)
			}
		})
	}
}

// The header's input and the trailer's output are written byte for byte
// in their place (WriteTo splices them into the encoded line): strings
// holding quotes, backslashes, spaces, HTML characters and the key itself
// stay as they were, and a path before the input that holds the key does
// not catch the splice.
func TestRecordRawFieldsByteForByte(t *testing.T) {
	tool := load(t, newExecutor(t), "echo_reactor", nil)
	in := `{"data":"a \"input\":0 \\\" \"output\":0 <&> ü\u2028 ,\"x\": 1"}`
	res, b, err := record(t, tool, executor.Request{Input: []byte(in)}, executor.RecordOptions{Manifest: `/m/"input":0 x.json`, Module: `C:\"input":0`})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("line %d is not JSON: %s", i+1, l)
		}
	}
	if !strings.Contains(lines[0], `"input":`+in+`,`) || !strings.Contains(lines[len(lines)-1], `"output":`+string(res.Output)+`,`) {
		t.Fatalf("raw fields not in place:\n%s", b)
	}
	rec := parseRecording(t, b)
	if string(rec.Header.Input) != in || rec.Header.Manifest != `/m/"input":0 x.json` || rec.Header.Module != `C:\"input":0` {
		t.Fatalf("header input %s manifest %q module %q", rec.Header.Input, rec.Header.Manifest, rec.Header.Module)
	}
	if !bytes.Equal(rec.Trailer.Output, res.Output) || string(res.Output) != in {
		t.Fatalf("trailer output %s, result %s", rec.Trailer.Output, res.Output)
	}
	if rep := replay(t, tool, b); !rep.Identical {
		t.Fatalf("replay: %q", rep.Divergence)
	}
	// Written twice, the same bytes (WriteTo restores what it spliced).
	rec2 := executor.NewRecorder(executor.RecordOptions{})
	if _, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(in), Record: rec2, Context: executor.CallContext{TenantID: "t1", RunID: "r1"}}); err != nil {
		t.Fatal(err)
	}
	var w1, w2 bytes.Buffer
	n1, err1 := rec2.WriteTo(&w1)
	n2, err2 := rec2.WriteTo(&w2)
	if err1 != nil || err2 != nil || !bytes.Equal(w1.Bytes(), w2.Bytes()) || n1 != int64(w1.Len()) || n2 != n1 {
		t.Fatalf("two writes: %v %v, %d and %d bytes of %d:\n%s\n%s", err1, err2, n1, n2, w1.Len(), w1.Bytes(), w2.Bytes())
	}
}

// Recording costs nothing when off: an unrecorded call on a recordable
// executor (Config.WithRecordable, serve --record-failures) allocates
// exactly what one on a plain executor does: for a WAT echo, a Go guest,
// and a WAT reactor that reads the clock and random bytes in every call
// (through the instance's switch, switchTape, on the recordable one).
func TestRecordingOffAllocatesNothing(t *testing.T) {
	for _, tc := range []struct{ fixture, input string }{
		{"echo_reactor", `{"data":"x"}`},
		{"go_echo_reactor", `{"a":1}`},
		{"replay_clock_random", `{}`}, // a clock reading and 8 random bytes per call
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			req := executor.Request{Input: []byte(tc.input), Context: executor.CallContext{TenantID: "t1", RunID: "r1"}}
			var tools [2]*executor.Tool // plain, recordable
			for i := range tools {
				e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithRecordable(i == 1) })
				tools[i] = load(t, e, tc.fixture, nil)
				for j := 0; j < 20; j++ {
					if _, err := tools[i].Invoke(context.Background(), req); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The least of 10 alternating measurements each: AllocsPerRun
			// counts the process's allocations, and background work (a
			// pool's refill, the test runner) adds some to any of them.
			least := [2]float64{1e9, 1e9}
			for round := 0; round < 10; round++ {
				for i, tool := range tools {
					least[i] = min(least[i], testing.AllocsPerRun(100, func() { _, _ = tool.Invoke(context.Background(), req) }))
				}
			}
			plain, recordable := least[0], least[1]
			t.Logf("allocs per call: %.1f plain, %.1f recordable", plain, recordable)
			if raceEnabled {
				// Under -race on a loaded machine the background work
				// overlaps every measurement (the CI preview of 250fab1 saw
				// 31 plain, 32 recordable for the Go guest; 31 and 31 here
				// under -race at load 2, 30 and 30 without it): the exact
				// comparison is the normal build's.
				return
			}
			if recordable != plain {
				t.Errorf("an unrecorded call on a recordable executor allocates %.1f, on a plain one %.1f", recordable, plain)
			}
		})
	}
}

// A call on a closed tool never begins: its recording still writes (a
// header without the tool's fields and a trailer with the failure) rather
// than failing WriteTo.
func TestRecordClosedTool(t *testing.T) {
	tool := load(t, newExecutor(t), "echo_reactor", nil)
	if err := tool.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := executor.NewRecorder(executor.RecordOptions{})
	_, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"data":"x"}`), Record: rec})
	if err == nil {
		t.Fatal("a call on a closed tool succeeded")
	}
	var buf bytes.Buffer
	if _, err := rec.WriteTo(&buf); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	r := parseRecording(t, buf.Bytes())
	if r.Trailer.Outcome != "internal-error" || r.Header.Format != executor.RecordingFormat {
		t.Fatalf("recording of a closed tool's call:\n%s", buf.Bytes())
	}
}
