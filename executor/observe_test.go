package executor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

func TestCallObserverLifecycle(t *testing.T) {
	var mu sync.Mutex
	var evs []executor.CallEvent
	e := newExecutor(t, func(c executor.Config) executor.Config {
		return c.WithCallObserver(func(ev executor.CallEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() })
	})
	tool := load(t, e, "echo_reactor", func(m map[string]any) {
		m["input"] = map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer", "default": 1}}}
	})
	if _, err := tool.Invoke(context.Background(), executor.Request{CallID: "c1", Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{"n":"x"}`)}); err == nil {
		t.Fatal("invalid input accepted")
	}
	phases := []executor.Phase{}
	for _, ev := range evs {
		phases = append(phases, ev.Phase)
	}
	want := []executor.Phase{executor.PhasePending, executor.PhaseInProgress, executor.PhaseCompleted, executor.PhasePending, executor.PhaseFailed}
	if len(phases) != len(want) {
		t.Fatalf("phases = %v", phases)
	}
	for i := range want {
		if phases[i] != want[i] {
			t.Fatalf("phases = %v, want %v", phases, want)
		}
	}
	if evs[0].CallID != "c1" || evs[2].CallID != "c1" || evs[3].CallID == "" || evs[3].CallID != evs[4].CallID {
		t.Fatalf("call ids: %q %q %q %q", evs[0].CallID, evs[2].CallID, evs[3].CallID, evs[4].CallID)
	}
	if evs[0].Input != nil || string(evs[1].Input) != `{"n":1}` || string(evs[2].Input) != `{"n":1}` {
		t.Fatalf("inputs: %q %q %q", evs[0].Input, evs[1].Input, evs[2].Input)
	}
	if evs[4].Input != nil || !isCode(evs[4].Err, toolerr.InputValidationFailed) || evs[2].Result == nil {
		t.Fatalf("failed event = %+v", evs[4])
	}
}
