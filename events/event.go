package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Event is one lifecycle record of one tool call. Records of one call share
// ToolCallID; consumers merge them, last write wins. Fields marshal in the
// declared order. Payloads (raw input, output) are never included: only the
// canonical projection inside Meta.
type Event struct {
	ToolCallID string    `json:"toolCallId"`
	Status     string    `json:"status"` // pending, in_progress, completed, failed
	Tool       string    `json:"tool"`
	Time       time.Time `json:"time"`
	TenantID   string    `json:"tenantId,omitempty"`
	RunID      string    `json:"runId,omitempty"`
	RequestID  string    `json:"requestId,omitempty"`
	// Error is set on failed.
	Error *EventError `json:"error,omitempty"`
	// Usage is set on completed, and on failed when the guest ran.
	Usage *executor.Usage `json:"usage,omitempty"`
	// Meta is {"x.ai/tool": envelope}; nil (omitted) on a failure to parse
	// the input, which carries no envelope.
	Meta map[string]Meta `json:"_meta,omitempty"`
}

// EventError is the native code and message of a failed call.
type EventError struct {
	Code    toolerr.Code `json:"code"`
	Message string       `json:"message"`
}

// FromCall builds the record of one executor lifecycle event. pending
// carries the envelope without input (not yet validated); in_progress,
// completed and failed after validation carry it with the projected input;
// a failed call whose input did not validate carries no envelope.
func FromCall(ev executor.CallEvent) Event {
	e := Event{
		ToolCallID: ev.CallID,
		Status:     string(ev.Phase),
		Time:       time.Now().UTC(),
	}
	if ev.Context != nil {
		e.TenantID, e.RunID, e.RequestID = ev.Context.TenantID, ev.Context.RunID, ev.Context.RequestID
	}
	if ev.Result != nil && (ev.Phase == executor.PhaseCompleted || ev.Phase == executor.PhaseFailed) {
		u := ev.Result.Usage
		e.Usage = &u
	}
	var te *toolerr.Error
	if ev.Phase == executor.PhaseFailed && ev.Err != nil {
		te = toolerr.As(ev.Err)
		e.Error = &EventError{Code: te.Code, Message: te.Message}
	}
	if ev.Tool == nil {
		return e
	}
	m := ev.Tool.Manifest()
	e.Tool = m.ID
	if te != nil && ev.Input == nil && te.Code == toolerr.InputValidationFailed {
		return e // a failed parse carries no envelope
	}
	var in []byte
	if ev.Phase != executor.PhasePending {
		in = ev.Input
	}
	e.Meta = map[string]Meta{MetaKey: NewMeta(m, in)}
	return e
}

// Recorder writes lifecycle records as JSON lines to a writer. It is safe
// for concurrent use; each record is one Write of one whole line.
type Recorder struct {
	mu     sync.Mutex
	w      io.Writer
	closer io.Closer
	err    error
}

// NewRecorder returns a Recorder writing to w. Closing it does not close w.
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: w} }

// Open returns a Recorder for a --events destination: "-" is stdout (given
// as the writer to use), any other value a file created or appended to
// (mode 0600). Close the Recorder to close the file.
func Open(dest string, stdout io.Writer) (*Recorder, error) {
	if dest == "" {
		return nil, errors.New("events: empty destination")
	}
	if dest == "-" {
		return NewRecorder(stdout), nil
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return &Recorder{w: f, closer: f}, nil
}

// Observe records ev; it has the signature executor.Config.WithCallObserver
// wants. A write failure is kept (see Err) and never blocks the call.
func (r *Recorder) Observe(ev executor.CallEvent) { r.Write(FromCall(ev)) }

// Write writes one record as a JSON line.
func (r *Recorder) Write(e Event) {
	b, err := json.Marshal(e)
	if err != nil {
		r.setErr(err)
		return
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.w.Write(b); err != nil && r.err == nil {
		r.err = err
	}
}

func (r *Recorder) setErr(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// Err returns the first write error, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the file Open created (nothing otherwise) and returns the
// first write error.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cerr error
	if r.closer != nil {
		cerr = r.closer.Close()
		r.closer = nil
	}
	return errors.Join(r.err, cerr)
}
