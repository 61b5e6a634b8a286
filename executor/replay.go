package executor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/toolerr"
)

// UnusableError is a recording replay cannot use (ReadRecording,
// Tool.Replay): not a recording, an unknown version, a bad line, no
// trailer, truncated.
type UnusableError struct{ Msg string }

func (e *UnusableError) Error() string { return e.Msg }

func unusable(format string, a ...any) error { return &UnusableError{Msg: fmt.Sprintf(format, a...)} }

// maxRecordingLine caps one line of a recording file (a response body of
// the default cap, in base64, fits).
const maxRecordingLine = 64 << 20

// ReadRecording parses a recording (docs/replay.md). Every failure is an
// *UnusableError naming the line.
func ReadRecording(rd io.Reader) (*Recording, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordingLine)
	rec := &Recording{}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if rec.Trailer != nil {
			return nil, unusable("line %d: a line after the trailer", line)
		}
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(b, &kind); err != nil {
			return nil, unusable("line %d: not JSON: %v", line, err)
		}
		if line == 1 && kind.Kind != "header" {
			return nil, unusable("line 1: not a sandboxd recording (no header line)")
		}
		var err error
		switch kind.Kind {
		case "header":
			if line != 1 {
				return nil, unusable("line %d: a second header", line)
			}
			if err = json.Unmarshal(b, &rec.Header); err == nil {
				if rec.Header.Format != RecordingFormat {
					return nil, unusable("line 1: format %q is not %q", rec.Header.Format, RecordingFormat)
				}
				if rec.Header.Version != RecordingVersion {
					return nil, unusable("line 1: recording format version %d is not supported (this sandboxd reads version %d)", rec.Header.Version, RecordingVersion)
				}
			}
		case "call":
			c := &RecordedCall{}
			if err = json.Unmarshal(b, c); err == nil {
				if want := len(rec.Calls) + 1; c.N != want {
					return nil, unusable("line %d: host call #%d where #%d was due", line, c.N, want)
				}
				err = checkCall(c)
				rec.Calls = append(rec.Calls, c)
			}
		case "truncated":
			rec.Truncated = &RecordTruncated{}
			err = json.Unmarshal(b, rec.Truncated)
		case "trailer":
			rec.Trailer = &RecordTrailer{}
			err = json.Unmarshal(b, rec.Trailer)
		default:
			return nil, unusable("line %d: unknown line kind %q", line, kind.Kind)
		}
		if err != nil {
			return nil, unusable("line %d: %v", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, unusable("line %d: %v", line+1, err)
	}
	if line == 0 {
		return nil, unusable("the file is empty")
	}
	if rec.Trailer == nil {
		return nil, unusable("no trailer line: the recording is incomplete (the recording process stopped before the call ended, or the file was cut)")
	}
	return rec, nil
}

// checkCall refuses a host call line replay could not serve.
func checkCall(c *RecordedCall) error {
	switch c.Fn {
	case "clock":
		if c.Clock != "realtime" && c.Clock != "monotonic" {
			return fmt.Errorf("host call #%d: clock %q is neither realtime nor monotonic", c.N, c.Clock)
		}
	case "random":
	case "http_request":
		if c.Request == nil || (c.Response == nil) == (c.Error == nil) {
			return fmt.Errorf("host call #%d: an http_request needs a request and either a response or an error", c.N)
		}
		if r := c.Response; r != nil {
			sum := 0
			for _, n := range r.Reads {
				if n <= 0 {
					return fmt.Errorf("host call #%d: a read of %d bytes", c.N, n)
				}
				sum += n
			}
			if sum != len(r.Body) {
				return fmt.Errorf("host call #%d: the reads add up to %d bytes, the body has %d", c.N, sum, len(r.Body))
			}
		}
	default:
		return fmt.Errorf("host call #%d: unknown host function %q", c.N, c.Fn)
	}
	return nil
}

// ReplayReport is what Tool.Replay found.
type ReplayReport struct {
	// Identical: same host calls, outcome, output bytes and fuel.
	Identical bool
	// Divergence is the first difference, "" when identical.
	Divergence string
	// Result and Err are the replayed call's.
	Result *Result
	Err    error
	// Notes are differences that do not make a divergence (another module
	// or manifest digest).
	Notes []string
}

// Replay re-runs the call of rec on t with every host answer served from
// rec (no network, no clock, no entropy) and compares it with the recorded
// one. An unusable recording is an *UnusableError.
func (t *Tool) Replay(ctx context.Context, rec *Recording) (*ReplayReport, error) {
	if rec.Truncated != nil {
		return nil, unusable("the recording was truncated at host call #%d (%s): it cannot be replayed", rec.Truncated.AtCall, rec.Truncated.Reason)
	}
	h := &rec.Header
	rep := &ReplayReport{}
	if h.ToolID != t.ID() {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the recording is of tool %s, replayed on %s", h.ToolID, t.ID()))
	}
	if h.ModuleDigest != "" && h.ModuleDigest != t.digest {
		rep.Notes = append(rep.Notes, fmt.Sprintf("module digest %s, recorded %s", t.digest, h.ModuleDigest))
	}
	if h.ManifestDigest != "" && t.manifestDigest != "" && h.ManifestDigest != t.manifestDigest {
		rep.Notes = append(rep.Notes, fmt.Sprintf("manifest digest %s, recorded %s", t.manifestDigest, h.ManifestDigest))
	}
	input := []byte(h.Input)
	if input == nil {
		input = h.InputBase64
	}
	cc := h.Context
	cc.Env, cc.Config, cc.Secrets = maps.Clone(h.Env), maps.Clone(h.Config), nil
	for k, v := range h.ConfigBase64 {
		if cc.Config == nil {
			cc.Config = map[string]json.RawMessage{}
		}
		cc.Config[k] = v
	}
	rp := &replayer{rec: rec, secrets: map[string]bool{}}
	for _, s := range h.Secrets {
		rp.secrets[s] = true
	}
	res, err := t.invokeReplay(ctx, Request{Input: input, Context: cc}, rp)
	rep.Result, rep.Err = res, err
	rep.Divergence = rp.compare(res, err)
	rep.Identical = rep.Divergence == ""
	return rep, nil
}

// invokeReplay is Invoke with rp as the call's tape.
func (t *Tool) invokeReplay(ctx context.Context, req Request, rp *replayer) (*Result, error) {
	req.replay = rp
	return t.Invoke(ctx, req)
}

// replayer serves a call's host answers from a recording.
type replayer struct {
	rec     *Recording
	secrets map[string]bool

	mu       sync.Mutex
	pos      int    // answers served
	diverged string // the first divergence
}

func (rp *replayer) start(*invocation) {}

// next returns the next recorded answer if it answers the question asked
// (same fn and match), else records the divergence and makes the guest
// trap.
func (rp *replayer) next(fn, asked string, match func(c *RecordedCall) string) *RecordedCall {
	c, msg := rp.take(fn, asked, match)
	if msg != "" {
		trapf("replay diverged: %s", msg)
	}
	return c
}

// take is next without the trap: it returns the divergence instead (for
// host work outside a guest: a declarative HTTP tool's request).
func (rp *replayer) take(fn, asked string, match func(c *RecordedCall) string) (*RecordedCall, string) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.diverged != "" {
		return nil, rp.diverged
	}
	var c *RecordedCall
	msg := ""
	switch {
	case rp.pos >= len(rp.rec.Calls):
		msg = fmt.Sprintf("%s: the guest asked %s, recorded nothing more (%d host calls)", rp.callName(fn), asked, len(rp.rec.Calls))
	default:
		c = rp.rec.Calls[rp.pos]
		if c.Fn != fn {
			msg = fmt.Sprintf("%s: the guest asked %s, recorded %s", rp.callName(fn), asked, describeCall(c))
		} else if d := match(c); d != "" {
			msg = fmt.Sprintf("%s: the guest asked %s, recorded %s", rp.callName(fn), asked, d)
		}
	}
	if msg != "" {
		rp.diverged = msg
		return nil, msg
	}
	rp.pos++
	return c, ""
}

// callName names the host call due, the guest asking fn: its place in the
// recording's one sequence and, when other kinds of answer came before it,
// its place among fn's own ("host call #38 (http_request #2)": a Go guest
// reads the clock many times before its first request).
func (rp *replayer) callName(fn string) string {
	n, k := rp.pos+1, 1
	for _, c := range rp.rec.Calls[:min(rp.pos, len(rp.rec.Calls))] {
		if c.Fn == fn {
			k++
		}
	}
	if k == n {
		return fmt.Sprintf("host call #%d", n)
	}
	return fmt.Sprintf("host call #%d (%s #%d)", n, fnName(fn), k)
}

// fnName is the host function a recorded kind of answer comes from.
func fnName(fn string) string {
	switch fn {
	case "clock":
		return "clock_time_get"
	case "random":
		return "random_get"
	}
	return fn
}

func describeCall(c *RecordedCall) string {
	switch c.Fn {
	case "clock":
		return "clock_time_get(" + c.Clock + ")"
	case "random":
		return "random_get(" + strconv.Itoa(len(c.Bytes)) + " bytes)"
	case "http_request":
		return "http_request " + describeRequest(c.Request)
	}
	return c.Fn
}

func describeRequest(r *RecordedRequest) string {
	m := r.Method
	if m == "" {
		m = "GET"
	}
	return strings.ToUpper(m) + " " + r.URL
}

func (rp *replayer) clock(which string) int64 {
	c := rp.next("clock", "clock_time_get("+which+")", func(c *RecordedCall) string {
		if c.Clock != which {
			return "clock_time_get(" + c.Clock + ")"
		}
		return ""
	})
	return c.NS
}

func (rp *replayer) random(p []byte) (int, error) {
	c := rp.next("random", "random_get("+strconv.Itoa(len(p))+" bytes)", func(c *RecordedCall) string {
		if len(c.Bytes) != len(p) {
			return "random_get(" + strconv.Itoa(len(c.Bytes)) + " bytes)"
		}
		return ""
	})
	return copy(p, c.Bytes), nil
}

func (rp *replayer) sleep(*sleeper, int64) {}

func (rp *replayer) secret(name string) ([]byte, bool) {
	return []byte(egress.SecretPlaceholder(name)), true
}

func (rp *replayer) http(_ context.Context, _ *invocation, req *egress.Request) (int, http.Header, io.ReadCloser, error) {
	asked := &RecordedRequest{Method: req.Method, URL: req.URL, Headers: req.Header, Body: req.Body}
	// No trap: the request may be host work outside a guest (a declarative
	// HTTP tool). The guest gets an error and traps at its next host call.
	c, msg := rp.take("http_request", "http_request "+describeRequest(asked), func(c *RecordedCall) string {
		return requestDiff(asked, c.Request)
	})
	if msg != "" {
		return 0, nil, nil, &egress.Error{Reason: egress.ReasonInternal, Msg: "replay diverged: " + msg}
	}
	if c.Error != nil {
		return 0, nil, nil, &egress.Error{Reason: egress.Reason(c.Error.Reason), Msg: c.Error.Message}
	}
	r := c.Response
	return r.Status, r.Headers.Clone(), &replayedBody{resp: r}, nil
}

// requestDiff describes the recorded request where it differs from the
// one asked, "" when they are the same.
func requestDiff(asked, rec *RecordedRequest) string {
	if !strings.EqualFold(orGET(asked.Method), orGET(rec.Method)) || asked.URL != rec.URL {
		return "http_request " + describeRequest(rec)
	}
	names := map[string]bool{}
	for k := range asked.Headers {
		names[k] = true
	}
	for k := range rec.Headers {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		a, aok := asked.Headers[k]
		r, rok := rec.Headers[k]
		switch {
		case aok && !rok:
			return fmt.Sprintf("no header %s (the guest sent %s: %q)", k, k, a)
		case !aok && rok:
			return fmt.Sprintf("header %s: %q (the guest sent none)", k, r)
		case a != r:
			return fmt.Sprintf("header %s: %q (the guest sent %q)", k, r, a)
		}
	}
	if !bytes.Equal(asked.Body, rec.Body) {
		return fmt.Sprintf("a body of %d bytes %s (the guest sent %d bytes %s)", len(rec.Body), shortBytes(rec.Body), len(asked.Body), shortBytes(asked.Body))
	}
	return ""
}

func orGET(m string) string {
	if m == "" {
		return "GET"
	}
	return m
}

func shortBytes(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…"
	}
	return strconv.Quote(string(b))
}

// replayedBody hands out a recorded body in the recorded reads.
type replayedBody struct {
	resp *RecordedResponse
	read int // reads served
	off  int // body bytes served
	part int // bytes of the current read already served (a smaller buffer)
}

func (b *replayedBody) Read(p []byte) (int, error) {
	if b.read >= len(b.resp.Reads) {
		if e := b.resp.ReadError; e != nil {
			return 0, &egress.Error{Reason: egress.Reason(e.Reason), Msg: e.Message}
		}
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	left := b.resp.Reads[b.read] - b.part
	n := copy(p[:min(len(p), left)], b.resp.Body[b.off:])
	b.off += n
	b.part += n
	if b.part == b.resp.Reads[b.read] {
		b.read++
		b.part = 0
	}
	return n, nil
}

func (b *replayedBody) Close() error { return nil }

// compare returns the first difference between the replayed call and the
// recorded one, "" when none.
func (rp *replayer) compare(res *Result, err error) string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.diverged != "" {
		return rp.diverged
	}
	tr := rp.rec.Trailer
	if rp.pos != len(rp.rec.Calls) {
		return fmt.Sprintf("host calls: the guest made %d, the recording has %d (the next recorded one is #%d, %s)", rp.pos, len(rp.rec.Calls), rp.pos+1, describeCall(rp.rec.Calls[rp.pos]))
	}
	outcome, msg := "result", ""
	if err != nil {
		te := toolerr.As(err)
		outcome, msg = string(te.Code), te.Message
	}
	if outcome != tr.Outcome {
		s := fmt.Sprintf("outcome: replay %s, recorded %s", outcome, tr.Outcome)
		if msg != "" {
			s += " (replay: " + msg + ")"
		}
		return s
	}
	machineBound := outcome == string(toolerr.LimitsExceeded) && !strings.Contains(msg, "memMB") ||
		outcome == string(toolerr.DeadlineExceeded) || outcome == string(toolerr.Cancelled)
	if err != nil && tr.Error != nil && !machineBound && msg != tr.Error.Message {
		return fmt.Sprintf("error message: replay %q, recorded %q", msg, tr.Error.Message)
	}
	if err == nil {
		want := []byte(tr.Output)
		if want == nil {
			want = tr.OutputBase64
		}
		var got []byte
		if res != nil {
			got = res.Output
		}
		if want == nil && tr.OutputSha256 != "" { // an output past the cap: its hash
			if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != tr.OutputSha256 {
				return fmt.Sprintf("output: replay %s (%d bytes, sha256 %x), recorded %d bytes, sha256 %s", shortBytes(got), len(got), sum, tr.OutputBytes, tr.OutputSha256)
			}
		} else if !bytes.Equal(got, want) {
			return fmt.Sprintf("output: replay %s, recorded %s", shortBytes(got), shortBytes(want))
		}
	}
	if machineBound {
		return ""
	}
	var fuel int64
	if res != nil {
		fuel = res.Usage.Fuel
	}
	if fuel != tr.Fuel {
		return fmt.Sprintf("fuel: replay used %d, recorded %d", fuel, tr.Fuel)
	}
	return ""
}

// IsUnusable reports whether err is an *UnusableError.
func IsUnusable(err error) bool {
	var u *UnusableError
	return errors.As(err, &u)
}
