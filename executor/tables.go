package executor

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/limits"
)

// tableAccount is an instance's fuel.TableAccount, backed by its Account.
type tableAccount struct {
	acct *limits.Account
	held atomic.Int64 // bytes charged for table elements
}

func newTableAccount(acct *limits.Account) *tableAccount { return &tableAccount{acct: acct} }

// ReserveTable implements fuel.TableAccount.
func (a *tableAccount) ReserveTable(elems int64) bool {
	if elems < 0 || elems > math.MaxInt64/fuel.TableElemBytes {
		return false
	}
	n := elems * fuel.TableElemBytes
	if !a.acct.Reserve(n) {
		return false
	}
	a.held.Add(n)
	return true
}

// ReleaseTable implements fuel.TableAccount.
func (a *tableAccount) ReleaseTable(elems int64) {
	if elems <= 0 {
		return
	}
	n := elems * fuel.TableElemBytes
	a.acct.Release(n)
	a.held.Add(-n)
}

// bytes returns the table memory charged.
func (a *tableAccount) bytes() int64 {
	if a == nil {
		return 0
	}
	return a.held.Load()
}

// resetAccount starts a new call on in: its Account forgets the last call's
// host buffers, peak and refusals, and charges the instance's tables again.
func (in *instance) resetAccount() {
	in.acct.Reset()
	if n := in.tables.bytes(); n > 0 {
		in.acct.Reserve(n) // fitted beside the same linear memory before
	}
	if in.vars != nil && in.vars.bytes > 0 {
		in.acct.Reserve(in.vars.bytes) // an Extism plug-in's vars (varStore), charged with the instance
	}
}

// initContext returns the context an instance's initialisation runs under
// (instantiation, start, _initialize): it charges table growth to the
// instance and caps guest logs as a call's are (admitLog). It reserves the
// module's initial tables first; false means they do not fit in memMB (the
// Account recorded the refusal).
func (t *reactorHandler) initContext(ctx context.Context, tables *tableAccount) (context.Context, bool) {
	if !tables.ReserveTable(t.verdict.TableElems) {
		return ctx, false
	}
	return withLogBudget(fuel.WithTableAccount(ctx, tables), &logBudget{}), true
}

// errTablesOverMem fails an instantiation whose initial tables do not fit
// in memMB (classify reports the Account's refusal as limits-exceeded).
var errTablesOverMem = errors.New("the module's tables do not fit in memMB")
