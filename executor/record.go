package executor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Record and replay (docs/replay.md). A call with a tape — a Recorder
// (Request.Record) or a replayer (Tool.Replay) — runs on a fresh instance
// made for it, and every host answer that does not come from the call
// itself goes through the tape: the WASI clocks and random source (the
// instance's module config, tapeModuleConfig), the HTTP import of ABI v1
// and Extism (invocation.httpDo) and, in replay, secret_get. Without a tape
// each of those is one nil check.

// RecordingFormat and RecordingVersion name the recording format.
const (
	RecordingFormat  = "sandboxd-recording"
	RecordingVersion = 1
	// DefaultRecordMaxBytes caps a recording's answers (RecordOptions.MaxBytes).
	DefaultRecordMaxBytes = 8 << 20
	// recordLineOverhead is what one line costs besides its byte strings.
	recordLineOverhead = 64
)

// RecordHeader is a recording's first line.
type RecordHeader struct {
	Kind           string                     `json:"kind"`
	Format         string                     `json:"format"`
	Version        int                        `json:"version"`
	ToolID         string                     `json:"toolId"`
	ToolVersion    string                     `json:"toolVersion,omitempty"`
	Style          string                     `json:"style,omitempty"`
	Posture        string                     `json:"posture,omitempty"`
	ModuleDigest   string                     `json:"moduleDigest,omitempty"`
	ManifestDigest string                     `json:"manifestDigest,omitempty"`
	Manifest       string                     `json:"manifest,omitempty"`
	Module         string                     `json:"module,omitempty"`
	Input          json.RawMessage            `json:"input,omitempty"`
	InputBase64    []byte                     `json:"inputBase64,omitempty"`
	Context        CallContext                `json:"context"`
	Env            map[string]string          `json:"env,omitempty"`
	Config         map[string]json.RawMessage `json:"config,omitempty"`
	ConfigBase64   map[string][]byte          `json:"configBase64,omitempty"` // values that are not compact JSON, byte for byte
	Secrets        []string                   `json:"secrets,omitempty"`
	RecordedAt     string                     `json:"recordedAt,omitempty"`
	MaxBytes       int64                      `json:"maxBytes,omitempty"`
}

// RecordedCall is one host answer.
type RecordedCall struct {
	Kind     string            `json:"kind"`
	N        int               `json:"n"`
	Fn       string            `json:"fn"`
	Clock    string            `json:"clock,omitempty"`
	NS       int64             `json:"ns,omitempty"`
	Bytes    []byte            `json:"bytes,omitempty"`
	Request  *RecordedRequest  `json:"request,omitempty"`
	Response *RecordedResponse `json:"response,omitempty"`
	Error    *RecordedError    `json:"error,omitempty"`
}

// RecordedRequest is an HTTP request as the guest built it.
type RecordedRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"`
}

// RecordedResponse is an HTTP response as the guest received it.
type RecordedResponse struct {
	Status    int            `json:"status"`
	Headers   http.Header    `json:"headers,omitempty"`
	Body      []byte         `json:"body,omitempty"`
	Reads     []int          `json:"reads,omitempty"`
	ReadError *RecordedError `json:"readError,omitempty"`
	// Redacted: a secret value was replaced in the body, whose reads are
	// then the redacted body's, in maxBodyReadChunk pieces.
	Redacted bool `json:"redacted,omitempty"`
}

// RecordedError is a failed request or body read: the egress reason and
// message.
type RecordedError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// RecordTruncated is the marker of a recording that reached its cap.
type RecordTruncated struct {
	Kind   string `json:"kind"`
	AtCall int    `json:"atCall"`
	Bytes  int64  `json:"bytes"`
	Reason string `json:"reason"`
}

// RecordTrailer is a recording's last line.
type RecordTrailer struct {
	Kind         string          `json:"kind"`
	Outcome      string          `json:"outcome"`
	Output       json.RawMessage `json:"output,omitempty"`
	OutputBase64 []byte          `json:"outputBase64,omitempty"`
	OutputSha256 string          `json:"outputSha256,omitempty"`
	OutputBytes  int             `json:"outputBytes,omitempty"`
	Error        *RecordedFault  `json:"error,omitempty"`
	Fuel         int64           `json:"fuel"`
	HostCalls    int             `json:"hostCalls"`
}

// RecordedFault is a failed call's native error.
type RecordedFault struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Recording is a parsed recording (ReadRecording).
type Recording struct {
	Header    RecordHeader
	Calls     []*RecordedCall
	Truncated *RecordTruncated
	Trailer   *RecordTrailer
}

// RecordOptions configures a Recorder.
type RecordOptions struct {
	// MaxBytes caps the answers recorded (0: DefaultRecordMaxBytes).
	MaxBytes int64
	// Manifest and Module say where the recording process found them
	// (informational; replay reads Manifest when not told otherwise).
	Manifest, Module string
	// ManifestDigest overrides the digest of the manifest Load was given.
	ManifestDigest string
}

// Recorder records one call (Request.Record): pass a new one per call and
// write it out with WriteTo once Invoke returned. Not for concurrent calls.
type Recorder struct {
	opts RecordOptions

	mu        sync.Mutex
	inv       *invocation
	header    *RecordHeader // made by finalize
	calls     []*RecordedCall
	n         int // host answers so far, recorded or not
	size      int64
	charged   int64 // of size, charged to the call's account
	truncated *RecordTruncated
	trailer   *RecordTrailer
	secrets   []secretPattern
	// Kept by begin, start and end, encoded by finalize (WriteTo): a
	// recording serve discards costs the call no encoding.
	tool          *Tool
	cc            CallContext
	secretNames   []string
	started       time.Time
	input, output []byte
	inputJSON     bool // input parsed as JSON (validated), so only its compactness is in question
	ended         bool
	fuel          int64
	hostCalls     int
	fault         *toolerr.Error
	final         bool
}

type secretPattern struct{ value, placeholder string }

// NewRecorder returns a recorder for one call.
func NewRecorder(opts RecordOptions) *Recorder {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultRecordMaxBytes
	}
	return &Recorder{opts: opts}
}

// tape is what a recorded or replayed call's host answers go through.
type tape interface {
	// start binds the tape to the call's invocation (before any guest code).
	start(inv *invocation)
	// clock returns a reading of clock ("realtime" or "monotonic").
	clock(which string) int64
	// random fills p (at most one chunk of meteredRand).
	random(p []byte) (int, error)
	// sleep waits ns (record) or returns (replay).
	sleep(sl *sleeper, ns int64)
	// http performs (record) or answers (replay) one HTTP request.
	http(ctx context.Context, inv *invocation, req *egress.Request) (int, http.Header, io.ReadCloser, error)
	// secret answers secret_get in replay (ok false: the normal answer).
	secret(name string) ([]byte, bool)
}

// tapeModuleConfig routes the instance's clocks, sleeps and random source
// through sl's tape (instances made for a recorded or replayed call).
func tapeModuleConfig(mc wazero.ModuleConfig, sl *sleeper) wazero.ModuleConfig {
	tp := sl.tape
	return mc.
		WithWalltime(func() (int64, int32) {
			ns := tp.clock("realtime")
			return ns / 1e9, int32(ns % 1e9)
		}, 1).
		WithNanotime(func() int64 { return tp.clock("monotonic") }, 1).
		WithNanosleep(func(ns int64) { tp.sleep(sl, ns) }).
		WithRandSource(sl.rand(tapeRand{tp}))
}

type tapeRand struct{ tp tape }

func (r tapeRand) Read(p []byte) (int, error) { return r.tp.random(p) }

// httpDo is the HTTP import's request: through the call's tape when it
// has one, else the call's egress session.
func (inv *invocation) httpDo(ctx context.Context, req *egress.Request) (int, http.Header, io.ReadCloser, error) {
	if inv.tape != nil {
		return inv.tape.http(ctx, inv, req)
	}
	resp, err := inv.egressFor(ctx).session.Do(ctx, req)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.Status, resp.Header, resp, nil
}

// headersMap is http_headers_read's object (egress.Response.HeadersMap).
func headersMap(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		out[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return out
}

// monoBase is the origin of a recorded call's monotonic clock.
var monoBase = time.Now()

// begin keeps what the header is made of (Tool.invoke): the tool, the
// call context, the input and the secrets' values, for redaction from the
// call's first answer on.
func (r *Recorder) begin(t *Tool, req *Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tool, r.cc, r.input = t, req.Context, req.Input
	r.started = time.Now()
	// The secrets the call may use, known before anything is written.
	for name := range t.secretNames {
		v, ok := req.Context.Secrets[name]
		if !ok {
			v, ok = t.exec.cfg.egress.operatorSecret(t.ID(), name)
		}
		if ok && v != "" {
			r.secretNames = append(r.secretNames, name)
			r.addSecret(name, v)
		}
	}
	sort.Strings(r.secretNames)
}

// finalize makes the header and the trailer from what begin, start and
// end kept, for WriteTo; the caller holds r.mu.
func (r *Recorder) finalize() {
	if r.final {
		return
	}
	r.final = true
	r.header = &RecordHeader{}
	t, h := r.tool, r.header
	h.Kind, h.Format, h.Version = "header", RecordingFormat, RecordingVersion
	if t != nil { // nil: the call never began (its tool was closed)
		h.ToolID, h.ToolVersion, h.Style, h.Posture = t.ID(), t.m.Version, string(t.Style()), string(t.posture)
		h.ModuleDigest, h.ManifestDigest = t.digest, t.manifestDigest
	}
	if r.opts.ManifestDigest != "" {
		h.ManifestDigest = r.opts.ManifestDigest
	}
	h.Manifest, h.Module, h.MaxBytes = r.opts.Manifest, r.opts.Module, r.opts.MaxBytes
	h.Secrets = r.secretNames
	h.Context = r.cc
	h.Context.Env, h.Context.Config, h.Context.Secrets, h.Context.Settings = nil, nil, nil, nil
	h.RecordedAt = r.started.UTC().Format(time.RFC3339)
	h.Input = r.rawJSONKnown(r.input, r.inputJSON)
	if h.Input == nil && len(r.input) > 0 {
		h.InputBase64 = r.redact(r.input)
	}
	if len(r.cc.Settings) > 0 {
		h.Context.Settings = r.rawJSON(r.cc.Settings)
	}
	if inv := r.inv; inv != nil {
		r.resolved(inv.env, inv.config)
	}
	tr := &RecordTrailer{Kind: "trailer", Outcome: "result", Fuel: r.fuel, HostCalls: r.hostCalls}
	r.trailer = tr
	if te := r.fault; te != nil {
		tr.Outcome = string(te.Code)
		tr.Error = &RecordedFault{Code: string(te.Code), Message: r.redactString(te.Message)}
	}
	if r.output != nil {
		// A result's output is validated JSON (Result.Output), so only its
		// compactness is in question.
		out := r.redact(r.output)
		sum := sha256.Sum256(out)
		tr.OutputSha256 = hex.EncodeToString(sum[:])
		tr.OutputBytes = len(out)
		switch j := compactJSONKnown(out, true); {
		case r.truncated != nil || r.size+int64(len(out)) > r.opts.MaxBytes:
			// Past the cap the output is its hash alone (it is in the
			// call's memory already; the file need not hold it).
		case j != nil:
			tr.Output = j
		default:
			tr.OutputBase64 = out
		}
	}
	if len(r.secrets) == 0 {
		return
	}
	// A body a secret was redacted from gets the redacted body's reads.
	for _, c := range r.calls {
		if c.Response == nil || len(c.Response.Body) == 0 {
			continue
		}
		if red := r.redact(c.Response.Body); len(red) != len(c.Response.Body) || string(red) != string(c.Response.Body) {
			c.Response.Body, c.Response.Redacted = red, true
			c.Response.Reads = nil
			for off := 0; off < len(red); off += maxBodyReadChunk {
				c.Response.Reads = append(c.Response.Reads, min(maxBodyReadChunk, len(red)-off))
			}
		}
	}
}

// addSecret registers value (of secret name) for redaction: as written,
// JSON-escaped and percent-encoded, longest first.
func (r *Recorder) addSecret(name, value string) {
	ph := egress.SecretPlaceholder(name)
	forms := []string{value, url.QueryEscape(value), url.PathEscape(value)}
	if b, err := json.Marshal(value); err == nil {
		forms = append(forms, string(b[1:len(b)-1]))
	}
	for _, f := range forms {
		if f != "" {
			r.secrets = append(r.secrets, secretPattern{f, ph})
		}
	}
	sort.SliceStable(r.secrets, func(i, j int) bool { return len(r.secrets[i].value) > len(r.secrets[j].value) })
}

// redact returns b with every secret value replaced by its placeholder (b
// itself when none occurs: the caller copies what it must own).
func (r *Recorder) redact(b []byte) []byte {
	for _, p := range r.secrets {
		if strings.Contains(string(b), p.value) {
			b = []byte(strings.ReplaceAll(string(b), p.value, p.placeholder))
		}
	}
	return b
}

func (r *Recorder) redactString(s string) string { return string(r.redact([]byte(s))) }

// rawJSON is b redacted when that is still JSON and compact (a JSON line
// holds it byte for byte), else nil: the caller keeps the bytes in base64.
// b is not copied (a recording holds the call's bytes until it is written).
func (r *Recorder) rawJSON(b []byte) json.RawMessage { return r.rawJSONKnown(b, false) }

// rawJSONKnown is rawJSON of b, known to be JSON when valid is set (a
// validated input): redacting a secret's value or placeholder form keeps
// it JSON (the forms are as written, JSON-escaped or percent-encoded, so
// they sit inside strings), but when one was replaced it is checked in
// full again.
func (r *Recorder) rawJSONKnown(b []byte, valid bool) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	red := r.redact(b)
	if len(red) != len(b) || (len(red) > 0 && &red[0] != &b[0]) {
		valid = false
	}
	return compactJSONKnown(red, valid)
}

// compactJSON is b when it is compact JSON (encoding/json writes it back
// unchanged), else nil.
func compactJSON(b []byte) json.RawMessage { return compactJSONKnown(b, false) }

// compactJSONKnown is compactJSON of b, known to be valid JSON when valid
// is set: then only its whitespace is looked at, in one pass that reads
// nothing but quotes, backslashes and whitespace. With SetEscapeHTML(false)
// json.Compact changes exactly the whitespace outside strings, so valid
// JSON without such whitespace is what the encoder writes back unchanged.
func compactJSONKnown(b []byte, valid bool) json.RawMessage {
	if !valid && !json.Valid(b) {
		return nil
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			return nil
		case '"': // to the closing quote: the next one not escaped
			for {
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return nil // not JSON after all (valid was wrong)
				}
				i += 1 + j
				k := i - 1
				for k >= 0 && b[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break // an even run of backslashes escapes itself, not the quote
				}
			}
		}
	}
	return json.RawMessage(b)
}

func (r *Recorder) start(inv *invocation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inv = inv
}

// resolved puts the call's declared env and config values in the header
// (finalize; the invocation keeps them, unchanged, after the call).
func (r *Recorder) resolved(env map[string]string, config map[string][]byte) {
	h := r.header
	if len(env) > 0 {
		h.Env = make(map[string]string, len(env))
		for k, v := range env {
			h.Env[k] = r.redactString(v)
		}
	}
	if len(config) > 0 {
		h.Config = make(map[string]json.RawMessage, len(config))
		for k, v := range config {
			if j := r.rawJSON(v); j != nil {
				h.Config[k] = j
			} else {
				if h.ConfigBase64 == nil {
					h.ConfigBase64 = map[string][]byte{}
				}
				h.ConfigBase64[k] = r.redact(v)
			}
		}
	}
}

// add appends an answer of n bytes (plus the line's overhead) unless the
// recording is truncated or becomes so; the caller holds r.mu.
func (r *Recorder) add(c *RecordedCall, n int) bool {
	r.n++
	c.Kind, c.N = "call", r.n
	if r.truncated != nil {
		return false
	}
	if !r.charge(int64(n) + recordLineOverhead) {
		return false
	}
	r.calls = append(r.calls, c)
	return true
}

// charge counts n more bytes against the cap and the call's account; on
// refusal it truncates the recording. The caller holds r.mu.
func (r *Recorder) charge(n int64) bool {
	if r.truncated != nil {
		return false
	}
	if r.size+n > r.opts.MaxBytes {
		r.truncate("the recording reached its cap of " + mb(r.opts.MaxBytes) + " (--record-max-bytes)")
		return false
	}
	r.size += n
	if r.inv != nil && r.inv.acct != nil {
		if due := r.size - r.charged; due > 0 {
			if !r.inv.acct.Reserve(due) {
				r.size -= n
				r.truncate("the call's memMB account refused the recording's next " + mb(due))
				return false
			}
			r.charged = r.size
		}
	}
	return true
}

func (r *Recorder) truncate(reason string) {
	r.truncated = &RecordTruncated{Kind: "truncated", AtCall: r.n, Bytes: r.size, Reason: reason}
}

func (r *Recorder) clock(which string) int64 {
	var ns int64
	if which == "realtime" {
		ns = time.Now().UnixNano()
	} else {
		ns = int64(time.Since(monoBase)) + 1
	}
	r.mu.Lock()
	r.add(&RecordedCall{Fn: "clock", Clock: which, NS: ns}, 0)
	r.mu.Unlock()
	return ns
}

func (r *Recorder) random(p []byte) (int, error) {
	n, err := rand.Read(p)
	r.mu.Lock()
	r.add(&RecordedCall{Fn: "random", Bytes: append([]byte(nil), p[:n]...)}, n)
	r.mu.Unlock()
	return n, err
}

func (r *Recorder) sleep(sl *sleeper, ns int64) { sl.sleep(ns) }

func (r *Recorder) secret(string) ([]byte, bool) { return nil, false }

func (r *Recorder) http(ctx context.Context, inv *invocation, req *egress.Request) (int, http.Header, io.ReadCloser, error) {
	rr := &RecordedRequest{Method: req.Method, URL: r.redactString(req.URL), Body: r.redact(append([]byte(nil), req.Body...))}
	if len(req.Header) > 0 {
		rr.Headers = make(map[string]string, len(req.Header))
		for k, v := range req.Header {
			rr.Headers[r.redactString(k)] = r.redactString(v)
		}
	}
	resp, err := inv.egressFor(ctx).session.Do(ctx, req)
	c := &RecordedCall{Fn: "http_request", Request: rr}
	size := len(rr.URL) + len(rr.Body)
	for k, v := range rr.Headers {
		size += len(k) + len(v)
	}
	if err != nil {
		c.Error = &RecordedError{Reason: string(egress.ReasonOf(err)), Message: r.redactString(egress.MessageOf(err))}
		r.mu.Lock()
		r.add(c, size+len(c.Error.Message))
		r.mu.Unlock()
		return 0, nil, nil, err
	}
	c.Response = &RecordedResponse{Status: resp.Status}
	if len(resp.Header) > 0 {
		c.Response.Headers = make(http.Header, len(resp.Header))
		for k, vs := range resp.Header {
			out := make([]string, len(vs))
			for i, v := range vs {
				out[i] = r.redactString(v)
				size += len(k) + len(v)
			}
			c.Response.Headers[r.redactString(k)] = out
		}
	}
	r.mu.Lock()
	kept := r.add(c, size)
	r.mu.Unlock()
	if !kept {
		return resp.Status, resp.Header, resp, nil
	}
	return resp.Status, resp.Header, &recordedBody{src: resp, r: r, resp: c.Response}, nil
}

// recordedBody records the body bytes the guest reads, read by read.
type recordedBody struct {
	src  io.ReadCloser
	r    *Recorder
	resp *RecordedResponse
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	b.r.mu.Lock()
	defer b.r.mu.Unlock()
	if n > 0 && b.r.charge(int64(n)) {
		b.resp.Body = append(b.resp.Body, p[:n]...)
		b.resp.Reads = append(b.resp.Reads, n)
	}
	if err != nil && err != io.EOF && b.resp.ReadError == nil {
		b.resp.ReadError = &RecordedError{Reason: string(egress.ReasonOf(err)), Message: b.r.redactString(egress.MessageOf(err))}
	}
	return n, err
}

func (b *recordedBody) Close() error { return b.src.Close() }

// end writes the trailer from the call's outcome (Tool.finish);
// inputJSON says the input validated (so it is JSON: the validator's
// decoder agrees with encoding/json, manifest.FuzzDecodeJSON).
func (r *Recorder) end(res *Result, err error, inputJSON bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputJSON, r.ended, r.hostCalls = inputJSON, true, r.n
	if res != nil {
		r.fuel = res.Usage.Fuel
	}
	if err != nil {
		r.fault = toolerr.As(err)
	} else if res != nil {
		r.output = res.Output // encoded by finalize
	}
}

// WriteTo writes the recording as JSON lines (docs/replay.md). Call it once
// Invoke returned.
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		return 0, errors.New("executor: the recorded call has not ended (WriteTo before Invoke returned)")
	}
	r.finalize()
	lw := lineWriters.Get().(*lineWriter)
	lw.bw.Reset(w)
	lw.n = 0
	defer func() {
		lw.bw.Reset(nil) // the pool keeps nothing of w
		if lw.buf.Cap() <= 64<<10 {
			lineWriters.Put(lw) // nor a large line's buffer
		}
	}()
	if err := lw.line(r.header, `"input":`, &r.header.Input); err != nil {
		return lw.n, err
	}
	for _, c := range r.calls {
		if err := lw.line(c, "", nil); err != nil {
			return lw.n, err
		}
	}
	if r.truncated != nil {
		if err := lw.line(r.truncated, "", nil); err != nil {
			return lw.n, err
		}
	}
	if err := lw.line(r.trailer, `"output":`, &r.trailer.Output); err != nil {
		return lw.n, err
	}
	return lw.n, lw.bw.Flush()
}

// lineWriter writes a recording's JSON lines (WriteTo); pooled, as a
// kept recording of a short call costs more in allocation than in bytes.
type lineWriter struct {
	bw  *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
	n   int64
}

var lineWriters = sync.Pool{New: func() any {
	lw := &lineWriter{bw: bufio.NewWriterSize(nil, 16<<10)}
	lw.enc = json.NewEncoder(&lw.buf)
	lw.enc.SetEscapeHTML(false)
	return lw
}}

// line writes v as one JSON line. A raw field (key, *raw: the input, the
// output, already checked compact by finalize) is written as it is in the
// place of the encoding of 0 that stands for it while v is encoded:
// encoding/json would check and copy the bytes once more (it compacts what
// a json.Marshaler returns). The key cannot occur earlier in the line, as
// a quote inside a string value is escaped.
func (lw *lineWriter) line(v any, key string, raw *json.RawMessage) error {
	lw.buf.Reset()
	var val json.RawMessage
	if raw != nil && len(*raw) > 0 {
		val = *raw
		*raw = json.RawMessage("0")
		defer func() { *raw = val }()
	}
	if err := lw.enc.Encode(v); err != nil {
		return err
	}
	b := lw.buf.Bytes()
	if val != nil {
		i := bytes.Index(b, []byte(key+"0"))
		if i < 0 {
			return errors.New("executor: recording line lost its " + key + " field")
		}
		i += len(key)
		if err := lw.write(b[:i]); err != nil {
			return err
		}
		if err := lw.write(val); err != nil {
			return err
		}
		b = b[i+1:]
	}
	return lw.write(b)
}

func (lw *lineWriter) write(p []byte) error {
	n, err := lw.bw.Write(p)
	lw.n += int64(n)
	return err
}

// Truncated reports whether the recording reached its cap.
func (r *Recorder) Truncated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.truncated != nil
}

// startTape makes the call's recorder or replayer its tape (Tool.invoke).
func (inv *invocation) startTape(req *Request) {
	if req.Record != nil {
		inv.tape = req.Record
	} else {
		inv.tape = req.replay
	}
	inv.tape.start(inv)
}

// replaying reports whether the call is a replay (its secrets have no
// values; the network is never used).
func (inv *invocation) replaying() bool {
	_, ok := inv.tape.(*replayer)
	return ok
}

// handlesFor is the call's HTTP state: its egress session's, or for a
// replay one without a session (the network is never used).
func (inv *invocation) handlesFor(ctx context.Context) *egressState {
	if !inv.replaying() {
		return inv.egressFor(ctx)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.egress == nil {
		inv.egress = &egressState{handles: map[int32]*openResponse{}}
	}
	return inv.egress
}

// recordable reports whether the tool's instances keep their
// initialisation's answers (Config.WithRecordable; not for deterministic
// executors, whose clocks and random stream are their own).
func (t *toolEnv) recordable() bool { return t.cfg.recordable && !t.cfg.deterministic }

// pooledRecording reports whether inv is a recorded call that may run on
// a pooled, recycled or image-loaded instance: the tool's instances keep
// their initialisation's answers, and the posture is not none (a warm
// instance's state comes from earlier calls, which no recording holds).
func (t *reactorHandler) pooledRecording(inv *invocation) bool {
	if inv.tape == nil || !t.recordable() || t.posture == manifest.PostureNone {
		return false
	}
	_, ok := inv.tape.(*Recorder)
	return ok
}

// freshTape is the tape an instance made inside a call is built with: the
// call's, unless the call records on a recordable instance (pooled), which
// makes its own switch.
func freshTape(inv *invocation, pooled bool) tape {
	if pooled {
		return nil
	}
	return inv.tape
}

// prependInit starts the recording with the answers that made the
// instance's state (they are host calls #1…k; shared, never modified).
func (r *Recorder) prependInit(calls []*RecordedCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n != 0 || len(calls) == 0 {
		return
	}
	n := int64(0)
	for _, c := range calls {
		n += int64(len(c.Bytes)) + recordLineOverhead
	}
	r.n = len(calls)
	if !r.charge(n) {
		return
	}
	r.calls = append(r.calls, calls...)
}

// switchTape is a recordable instance's clocks and random source: the
// real ones, or during its initialisation and a recorded call the
// Recorder in cur.
type switchTape struct {
	sl  *sleeper
	cur atomic.Pointer[Recorder]
}

func (s *switchTape) start(*invocation) {}

func (s *switchTape) clock(which string) int64 {
	if r := s.cur.Load(); r != nil {
		return r.clock(which)
	}
	if which == "realtime" {
		return time.Now().UnixNano()
	}
	return int64(time.Since(monoBase)) + 1
}

func (s *switchTape) random(p []byte) (int, error) {
	if r := s.cur.Load(); r != nil {
		return r.random(p)
	}
	return rand.Read(p)
}

func (s *switchTape) sleep(sl *sleeper, ns int64) { sl.sleep(ns) }

func (s *switchTape) http(ctx context.Context, inv *invocation, req *egress.Request) (int, http.Header, io.ReadCloser, error) {
	// Not reached: the HTTP import asks the call's tape, never an instance's.
	return 0, nil, nil, &egress.Error{Reason: egress.ReasonInternal, Msg: "an instance's clock switch was asked for an HTTP request"}
}

func (s *switchTape) secret(string) ([]byte, bool) { return nil, false }
