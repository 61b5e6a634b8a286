package fuel

import (
	"context"
	"testing"
)

type testTables struct{ n int64 }

func (a *testTables) ReserveTable(elems int64) bool { a.n += elems; return true }
func (a *testTables) ReleaseTable(elems int64)      { a.n -= elems }

type callerKey struct{}
type parentKey struct{}

// CallContext answers MeterFrom, TableAccountFrom and the caller's key as
// the chain Meter.Context, WithTableAccount, context.WithValue did, falls
// through to its parent for everything else (and for a nil meter or
// account), and is one allocation.
func TestCallContext(t *testing.T) {
	m, tables := &Meter{}, &testTables{}
	parent := context.WithValue(context.Background(), parentKey{}, "p")
	ctx := CallContext(parent, m, tables, callerKey{}, 7)
	if MeterFrom(ctx) != m {
		t.Error("MeterFrom: not the node's meter")
	}
	if TableAccountFrom(ctx) != tables {
		t.Error("TableAccountFrom: not the node's account")
	}
	if v, _ := ctx.Value(callerKey{}).(int); v != 7 {
		t.Errorf("caller's key: %v, want 7", ctx.Value(callerKey{}))
	}
	if ctx.Value(parentKey{}) != "p" {
		t.Error("the parent's value is not reached")
	}

	// nil meter, account and key: the parent's answers.
	outer, outerTables := &Meter{}, &testTables{}
	under := WithTableAccount(outer.Context(parent), outerTables)
	ctx = CallContext(under, nil, nil, nil, nil)
	if MeterFrom(ctx) != outer || TableAccountFrom(ctx) != outerTables {
		t.Error("a nil meter or account does not fall through to the parent's")
	}
	if MeterFrom(CallContext(parent, nil, nil, nil, nil)) != nil {
		t.Error("MeterFrom of a context with no meter is not nil")
	}

	// Done, Err and Deadline are the parent's.
	cctx, cancel := context.WithCancel(parent)
	ctx = CallContext(cctx, m, tables, callerKey{}, 7)
	cancel()
	select {
	case <-ctx.Done():
	default:
		t.Error("Done is not the parent's")
	}
	if ctx.Err() != context.Canceled {
		t.Errorf("Err: %v", ctx.Err())
	}

	if raceEnabled {
		return
	}
	var sink context.Context
	if n := testing.AllocsPerRun(100, func() { sink = CallContext(parent, m, tables, callerKey{}, m) }); n != 1 {
		t.Errorf("CallContext: %v allocations, want 1", n)
	}
	_ = sink
}
