package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// callAs invokes tool for tenant with input and the given call context
// fields (env, config, secrets may be nil).
func callAs(t testing.TB, tool *executor.Tool, tenant, input string, cc executor.CallContext) (*executor.Result, error) {
	t.Helper()
	cc.TenantID, cc.RunID = tenant, "r-"+tenant
	return tool.Invoke(context.Background(), executor.Request{Input: []byte(input), Context: cc})
}

// F02: a module the fuel pass found NOT resettable (it uses table.set)
// exports its own mutable global named sandboxd.dirty. The pass now refuses
// every export named sandboxd.*, so by default the module does not load;
// an operator who allows unmetered modules runs it, and recycling, decided
// only by the pass's verdict kept with the compiled module, never applies
// to it: tenant B never sees tenant A's input and every call is the first
// its instance serves. (TestSaveFollowsVerdict checks the decision itself
// on the very instance the finding used.)
func TestF02DirtyExportRecycle(t *testing.T) {
	limits := func(m map[string]any) { m["limits"] = map[string]any{"memMB": 16, "cpuMs": 500} }
	_, err := newExecutor(t).Load(context.Background(), manifestFor(t, "f02_dirty_export", limits))
	wantCode(t, err, toolerr.HandlerShapeInvalid)

	for _, size := range []int{1, 0, 8} { // pool size 1 as in the finding; none; the default
		e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(size).WithAllowUnmetered(true) })
		tool := load(t, e, "f02_dirty_export", limits)
		for i, c := range []struct{ tenant, input string }{
			{"tenantA", `{"pw":"SECRET-A1"}`},
			{"tenantB", `{}`},
			{"tenantA", `{"pw":"hunter2!"}`},
			{"tenantB", `{}`},
			{"tenantB", `{}`},
		} {
			res, err := callAs(t, tool, c.tenant, c.input, executor.CallContext{})
			if err != nil {
				t.Fatalf("pool %d call %d: %v", size, i, err)
			}
			var out struct {
				Calls int    `json:"calls"`
				Prev  string `json:"prev"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("pool %d call %d: output %s: %v", size, i, res.Output, err)
			}
			if out.Calls != 0 || out.Prev != "........" {
				t.Fatalf("pool %d call %d (%s): %s — the instance carried state from an earlier call", size, i, c.tenant, res.Output)
			}
		}
		if n := tool.Stats().RecycledCalls; n != 0 {
			t.Fatalf("pool %d: %d calls were served by a recycled instance of a non-resettable module", size, n)
		}
	}
}

// xtenantOut is xtenant_reactor's (and xtenant_wat's) answer.
type xtenantOut struct {
	Calls   int      `json:"calls"`
	Token   string   `json:"token"`
	Leak    string   `json:"leak"`
	Environ []string `json:"environ"`
	Prev    []string `json:"prev"`
}

func decodeXtenant(t testing.TB, res *executor.Result) xtenantOut {
	t.Helper()
	var o xtenantOut
	if err := json.Unmarshal(res.Output, &o); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	return o
}

func xtenantNeeds(m map[string]any) {
	str := map[string]any{"type": "string"}
	m["needsSpec"] = map[string]any{
		"env":     map[string]any{"TOKEN": str},
		"config":  map[string]any{"CFG": str},
		"secrets": map[string]any{"KEY": str},
	}
}

// F17: posture none reuses a warm instance only for calls whose declared
// env, config and secrets equal those of the calls it served. A benign Go
// guest reading os.Getenv acts for each tenant with that tenant's own TOKEN,
// and neither its package state nor its process environment carries one
// tenant's input, config or secret to a call with other values. Calls with
// the same values do share the instance (posture none's documented reuse).
func TestF17NoneEnvReuse(t *testing.T) {
	e := newExecutor(t)
	tool := load(t, e, "xtenant_reactor", func(m map[string]any) {
		m["sandbox"] = "none"
		m["limits"] = map[string]any{"memMB": 64, "cpuMs": 2000}
		xtenantNeeds(m)
	})
	cc := func(token, cfg, key string) executor.CallContext {
		return executor.CallContext{
			Env:     map[string]string{"TOKEN": token},
			Config:  map[string]json.RawMessage{"CFG": json.RawMessage(`"` + cfg + `"`)},
			Secrets: map[string]string{"KEY": key},
		}
	}
	calls := []struct {
		tenant          string
		token, cfg, key string
		shared          bool // may be served by an instance of an earlier call with equal values
	}{
		{"tenantA", "token-of-A", "cfg-A", "key-A", false},
		{"tenantB", "token-of-B", "cfg-B", "key-B", false},
		{"tenantC", "token-of-C", "cfg-C", "key-C", false},
		{"tenantD", "token-of-A", "cfg-A", "key-D", false}, // only the secret differs
		{"tenantE", "token-of-A", "cfg-E", "key-A", false}, // only the config differs
		{"tenantA", "token-of-A", "cfg-A", "key-A", true},  // A again: may reuse A's instance
	}
	for i, c := range calls {
		res, err := callAs(t, tool, c.tenant, `{"s":"input-of-`+c.tenant+`"}`, cc(c.token, c.cfg, c.key))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		o := decodeXtenant(t, res)
		if o.Token != c.token {
			t.Fatalf("call %d (%s): os.Getenv(TOKEN) = %q, want %q", i, c.tenant, o.Token, c.token)
		}
		if !c.shared && (o.Calls != 0 || len(o.Prev) != 0 || o.Leak != "") {
			t.Fatalf("call %d (%s): served by an instance of a call with other needs: %s", i, c.tenant, res.Output)
		}
		if c.shared && o.Calls == 0 {
			t.Logf("call %d: the warm instance was not reused (allowed)", i)
		}
		// Whatever the instance kept must come from calls with the same values.
		allowed := map[string]bool{}
		for _, o := range calls {
			if o.token == c.token && o.cfg == c.cfg && o.key == c.key {
				allowed["input-of-"+o.tenant], allowed[o.cfg], allowed[o.key] = true, true, true
			}
		}
		for _, v := range append(o.Prev, o.Leak) {
			if v != "" && !allowed[v] {
				t.Fatalf("call %d (%s) saw %q from a call with other needs: %s", i, c.tenant, v, res.Output)
			}
		}
	}
	// The reuse itself still works for identical values.
	res, err := callAs(t, tool, "tenantA", `{}`, cc("token-of-A", "cfg-A", "key-A"))
	if err != nil {
		t.Fatal(err)
	}
	if o := decodeXtenant(t, res); o.Calls == 0 {
		t.Fatalf("posture none never reused a warm instance for identical needs: %s", res.Output)
	}
}

// TestCrossTenantMatrix: for every posture and guest kind, a guest that
// tries every channel it has (linear memory, a mutable global, a table, a
// passive segment, WASI fd 1, the environment; for Go also package state
// and os.Setenv) to carry tenant A's input into tenant B's call. Tenants
// alternate on one tool whose pool holds one instance, so reuse and
// recycling happen wherever the posture allows them. Every call's output
// must be exactly what the same call gets from a tool that never served
// anyone (and so never shows the other tenant's tag or token), except where
// posture none shares state by design: between calls with the same env,
// config and secrets.
func TestCrossTenantMatrix(t *testing.T) {
	type tenant struct{ id, tag, token string }
	tenants := []tenant{{"tenantA", "tagAAAAA", "tok-AAAA"}, {"tenantB", "tagBBBBB", "tok-BBBB"}}
	order := []int{0, 1, 0, 1, 1, 0, 0, 1}
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithPoolSize(1) })
	for _, kind := range []string{"xtenant_wat", "xtenant_reset_wat", "xtenant_reactor", "xtenant_command"} {
		for _, posture := range []string{"none", "context-isolated", "strict"} {
			for _, withNeeds := range []bool{false, true} {
				name := kind + "/" + posture + "/no-needs"
				if withNeeds {
					name = kind + "/" + posture + "/needs"
				}
				t.Run(name, func(t *testing.T) {
					edit := func(m map[string]any) {
						m["sandbox"] = posture
						m["limits"] = map[string]any{"memMB": 64, "cpuMs": 5000}
						if withNeeds {
							xtenantNeeds(m)
						}
					}
					var tryCall func(tool *executor.Tool, tn tenant) (string, error)
					call := func(tool *executor.Tool, tn tenant) string {
						t.Helper()
						out, err := tryCall(tool, tn)
						if err != nil {
							t.Fatalf("%s: %v", tn.id, err)
						}
						return out
					}
					tryCall = func(tool *executor.Tool, tn tenant) (string, error) {
						var cc executor.CallContext
						if withNeeds {
							cc = executor.CallContext{
								Env:     map[string]string{"TOKEN": tn.token},
								Config:  map[string]json.RawMessage{"CFG": json.RawMessage(`"cfg-` + tn.tag + `"`)},
								Secrets: map[string]string{"KEY": "key-" + tn.tag},
							}
						}
						res, err := callAs(t, tool, tn.id, `{"s":"`+tn.tag+`"}`, cc)
						if err != nil {
							return "", err
						}
						return string(res.Output), nil
					}
					// What each tenant's call gets from a tool that never served anyone.
					fresh := map[string]string{}
					for _, tn := range tenants {
						fresh[tn.id] = call(load(t, e, kind, edit), tn)
					}
					tool := load(t, e, kind, edit)
					served := map[string]bool{}
					for i, k := range order {
						tn, other := tenants[k], tenants[1-k]
						got, err := tryCall(tool, tn)
						if err != nil {
							// Under posture none a guest may break its own
							// state for later calls with the same values
							// (xtenant_wat drops its segment); never for a
							// call with other values.
							if posture != "none" || (withNeeds && !served[tn.id]) {
								t.Fatalf("call %d (%s): %v", i, tn.id, err)
							}
							t.Logf("call %d (%s): %v (a warm instance of its own earlier call)", i, tn.id, err)
						}
						served[tn.id] = true
						if posture == "none" && !withNeeds {
							continue // same (empty) needs: state may persist by design
						}
						// Posture none may reuse an instance for the same
						// tenant's values; never for the other's.
						if posture != "none" && got != fresh[tn.id] {
							t.Fatalf("call %d (%s): %s\nfresh tool answers %s", i, tn.id, got, fresh[tn.id])
						}
						if strings.Contains(got, other.tag) || strings.Contains(got, other.token) {
							t.Fatalf("call %d (%s) saw %s's data: %s", i, tn.id, other.id, got)
						}
					}
					t.Logf("fresh answers: %s", fresh[tenants[1].id])
					if n := tool.Stats().RecycledCalls; n > 0 {
						t.Logf("%d calls served by recycled instances", n)
					}
				})
			}
		}
	}
}

// Posture none keeps at most WithIdleInstances warm instances over all
// needs: a call with new values evicts the least recently kept instance
// rather than going without one, and an evicted instance never comes back.
func TestNoneWarmSetEvicts(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithIdleInstances(1) })
	tool := load(t, e, "xtenant_reactor", func(m map[string]any) {
		m["sandbox"] = "none"
		m["needsSpec"] = map[string]any{"env": map[string]any{"TOKEN": map[string]any{"type": "string"}}}
	})
	call := func(token string) xtenantOut {
		t.Helper()
		res, err := callAs(t, tool, "t-"+token, `{"s":"in-`+token+`"}`, executor.CallContext{Env: map[string]string{"TOKEN": token}})
		if err != nil {
			t.Fatal(err)
		}
		o := decodeXtenant(t, res)
		if o.Token != token {
			t.Fatalf("token %q, want %q", o.Token, token)
		}
		return o
	}
	call("one")
	if o := call("one"); o.Calls != 1 {
		t.Fatalf("the warm instance was not reused for the same env: %+v", o)
	}
	call("two") // evicts one's instance
	if o := call("two"); o.Calls != 1 {
		t.Fatalf("the new env got no warm instance: %+v", o)
	}
	if o := call("one"); o.Calls != 0 || len(o.Prev) != 0 {
		t.Fatalf("an evicted instance came back: %+v", o)
	}
}
