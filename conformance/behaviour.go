package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

// skipBehaviour reports the cases and probes of a tool that cannot run as
// skipped, with the reason.
func (r *runner) skipBehaviour(name string, m *manifest.Manifest, caseFiles []*CaseFile, reason string) {
	for _, cf := range caseFiles {
		for _, c := range cf.Cases {
			r.rep.add(name, "case "+c.Name, StatusSkip, "", "%s", reason)
		}
	}
	r.rep.add(name, "probe input-validation", StatusSkip, "", "%s", reason)
	r.rep.add(name, "probe output-schema", StatusSkip, "", "%s", reason)
	if !m.IsMutating() {
		r.rep.add(name, "probe determinism", StatusSkip, "", "%s", reason)
	}
}

// outcome is one call's result reduced to what cases compare.
type outcome struct {
	output []byte
	err    *toolerr.Error
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("error %s: %s", o.err.Code, o.err.Message)
	}
	return "output " + compact(o.output, 200)
}

func (o outcome) same(p outcome) bool {
	if (o.err == nil) != (p.err == nil) {
		return false
	}
	if o.err != nil {
		return o.err.Code == p.err.Code
	}
	return sameJSON(o.output, p.output)
}

func (r *runner) call(ctx context.Context, t *executor.Tool, c *Case) outcome {
	cctx, cancel := context.WithTimeout(ctx, r.caseTimeout(c))
	defer cancel()
	res, err := t.Invoke(cctx, executor.Request{Input: c.Input, Context: c.callContext()})
	if err != nil {
		return outcome{err: toolerr.As(err)}
	}
	return outcome{output: res.Output}
}

// caseTimeout is case c's deadline, from its start.
func (r *runner) caseTimeout(c *Case) time.Duration {
	if c.TimeoutMs > 0 {
		return time.Duration(c.TimeoutMs) * time.Millisecond
	}
	return r.opts.CaseTimeout
}

// work is the budget of a validation the runner does itself for case c
// of tool t (its config, its output against the case's schema or the
// tool's): the tool's cpuMs worth of work (manifest.WorkLimit), stopped
// when ctx ends or the case's timeout, counted from now, passes (G01).
func (r *runner) work(ctx context.Context, t *executor.Tool, c *Case) manifest.Work {
	_, cpu := t.Limits()
	deadline := time.Now().Add(r.caseTimeout(c))
	return manifest.Work{Limit: manifest.WorkLimit(cpu), Check: func() error {
		if err := ctx.Err(); err != nil {
			return toolerr.As(err)
		}
		if !time.Now().Before(deadline) {
			return toolerr.New(toolerr.DeadlineExceeded, "the case's %v timeout passed while the runner validated", r.caseTimeout(c))
		}
		return nil
	}}
}

// callCase runs a case: a tool case's input as is; a check case's config
// (default: the guardrail's declared config) and trace made the check's
// input by pack.Check.Input, which validates the config as a Kindgi pack
// service does before any guest runs.
func (r *runner) callCase(ctx context.Context, t *executor.Tool, chk *pack.Check, c *Case) outcome {
	if chk == nil {
		return r.call(ctx, t, c)
	}
	cfg := c.Config
	if len(cfg) == 0 {
		cfg = chk.Config
	}
	if len(cfg) == 0 {
		cfg = json.RawMessage(`{}`)
	}
	in, err := chk.InputLimited(cfg, c.Trace, r.work(ctx, t, c))
	if err != nil {
		return outcome{err: toolerr.As(err)}
	}
	cc := *c
	cc.Input = in
	return r.call(ctx, t, &cc)
}

// behaviour runs the cases and the probes of a loaded tool.
func (r *runner) behaviour(ctx context.Context, name string, mt *manifest.Tool, tool *executor.Tool, module []byte, pt packTool, caseFiles []*CaseFile) {
	add := func(check string, st Status, code toolerr.Code, format string, args ...any) {
		r.rep.add(name, check, st, string(code), format, args...)
	}
	type ran struct {
		c   *Case
		out outcome
	}
	var runs []ran
	var badOutputs []string
	for _, cf := range caseFiles {
		for i := range cf.Cases {
			c := &cf.Cases[i]
			out := r.callCase(ctx, tool, pt.check, c)
			runs = append(runs, ran{c, out})
			check := "case " + c.Name
			if out.err != nil && out.err.Code == toolerr.OutputValidationFailed && (c.Expect.Error == nil || c.Expect.Error.Code != string(toolerr.OutputValidationFailed)) {
				badOutputs = append(badOutputs, fmt.Sprintf("case %s: %s", c.Name, out.err.Message))
				add(check, StatusSkip, "", "the output broke the output schema (see probe output-schema)")
				continue
			}
			if st, code, why := judge(c, out, r.work(ctx, tool, c)); st == StatusPass {
				add(check, StatusPass, "", "%s", why)
			} else {
				add(check, st, code, "%s", why)
			}
		}
	}

	// probe input-validation (for a check: its config)
	if pt.check != nil {
		r.probeConfig(ctx, tool, pt.check, add)
	} else if bad, why := invalidInput(mt); bad == nil {
		add("probe input-validation", StatusSkip, "", "%s", why)
	} else {
		out := r.call(ctx, tool, &Case{Name: "probe-input-validation", Input: bad})
		switch {
		case out.err != nil && out.err.Code == toolerr.InputValidationFailed:
			add("probe input-validation", StatusPass, "", "%s (%s) is refused with input-validation-failed", compact(bad, 60), why)
		default:
			add("probe input-validation", StatusFail, toolerr.InputValidationFailed, "%s (%s) was not refused with input-validation-failed: got %s", compact(bad, 60), why, out)
		}
	}

	// probe output-schema: every output a case produced was checked by the
	// executor; check the successful ones again here, independently.
	valid := 0
	for _, rn := range runs {
		if rn.out.err == nil {
			if _, err := mt.ValidateOutputLimited(rn.out.output, manifest.DefaultValidationBudget, r.work(ctx, tool, rn.c)); err != nil {
				badOutputs = append(badOutputs, fmt.Sprintf("case %s: %s", rn.c.Name, toolerr.As(err).Message))
				continue
			}
			valid++
		}
	}
	switch {
	case len(badOutputs) > 0:
		add("probe output-schema", StatusFail, toolerr.OutputValidationFailed, "%s", strings.Join(badOutputs, "; "))
	case valid == 0:
		add("probe output-schema", StatusSkip, "", "no case produced an output")
	default:
		add("probe output-schema", StatusPass, "", "%d case output(s) valid against the output schema", valid)
	}

	// probe determinism
	if mt.IsMutating() {
		return
	}
	var inputs []*Case
	for _, rn := range runs {
		if rn.out.err == nil {
			inputs = append(inputs, rn.c)
		}
	}
	if len(inputs) == 0 {
		add("probe determinism", StatusSkip, "", "no case produced an output to compare")
		return
	}
	lopts := []executor.LoadOption{executor.WithBaseDir(pt.dir)}
	if module != nil {
		lopts = append(lopts, executor.WithModule(module))
	}
	a, errA := r.exec.Load(ctx, pt.raw, lopts...)
	b, errB := r.exec.Load(ctx, pt.raw, lopts...)
	for _, t := range []*executor.Tool{a, b} {
		if t != nil {
			defer t.Close(context.WithoutCancel(ctx))
		}
	}
	if err := errors.Join(errA, errB); err != nil {
		add("probe determinism", StatusFail, toolerr.As(err).Code, "cannot load fresh instances: %s", toolerr.As(err).Message)
		return
	}
	var diffs []string
	for _, c := range inputs {
		oa, ob := r.callCase(ctx, a, pt.check, c), r.callCase(ctx, b, pt.check, c)
		if !oa.same(ob) {
			diffs = append(diffs, fmt.Sprintf("case %s: %s vs %s", c.Name, oa, ob))
		}
	}
	if len(diffs) > 0 {
		hint := ""
		if !r.opts.Deterministic {
			hint = " (try --deterministic if it reads clocks or randomness)"
		}
		add("probe determinism", StatusWarn, "", "mutating: false, but two fresh instances answered differently%s: %s", hint, strings.Join(diffs, "; "))
		return
	}
	add("probe determinism", StatusPass, "", "%d case(s) answered alike on two fresh instances", len(inputs))
}

// probeConfig is a check's input-validation probe: a config breaking the
// configSchema (an object missing its required properties, or with an
// unknown one) must be refused with input-validation-failed before the
// guest runs.
func (r *runner) probeConfig(ctx context.Context, tool *executor.Tool, chk *pack.Check, add func(string, Status, toolerr.Code, string, ...any)) {
	const name = "probe input-validation"
	if chk.ConfigSchema == nil {
		add(name, StatusSkip, "", "no configSchema: every config object is accepted")
		return
	}
	for _, cand := range []struct{ v, why string }{
		{`{}`, "missing required properties"},
		{`{"conformance-unknown-property":true}`, "an unknown property"},
	} {
		if _, err := chk.Input(json.RawMessage(cand.v), nil); err == nil {
			continue
		}
		out := r.callCase(ctx, tool, chk, &Case{Name: "probe-config-validation", Config: json.RawMessage(cand.v), Trace: json.RawMessage(`{}`)})
		if out.err != nil && out.err.Code == toolerr.InputValidationFailed {
			add(name, StatusPass, "", "config %s (%s) is refused with input-validation-failed: %s", cand.v, cand.why, out.err.Message)
		} else {
			add(name, StatusFail, toolerr.InputValidationFailed, "config %s (%s) was not refused: got %s", cand.v, cand.why, out)
		}
		return
	}
	add(name, StatusSkip, "", "the configSchema accepts every generated violation (no required property, unknown ones allowed)")
}

// judge compares a case's outcome with its expectation; w bounds the
// validation of the output against the case's schema.
func judge(c *Case, out outcome, w manifest.Work) (Status, toolerr.Code, string) {
	e := c.Expect
	switch {
	case e.Error != nil:
		if out.err == nil {
			return StatusFail, "", fmt.Sprintf("expected error %s, got %s", e.Error.Code, out)
		}
		if string(out.err.Code) != e.Error.Code {
			return StatusFail, out.err.Code, fmt.Sprintf("expected error %s, got %s", e.Error.Code, out)
		}
		if e.Error.MessageContains != "" && !strings.Contains(out.err.Message, e.Error.MessageContains) {
			return StatusFail, out.err.Code, fmt.Sprintf("expected a message containing %q, got %q", e.Error.MessageContains, out.err.Message)
		}
		return StatusPass, "", "fails with " + e.Error.Code + " as expected"
	case out.err != nil:
		return StatusFail, out.err.Code, out.err.Message
	case len(e.Output) > 0:
		if !sameJSON(out.output, e.Output) {
			return StatusFail, "", fmt.Sprintf("output %s, expected %s", compact(out.output, 200), compact(e.Output, 200))
		}
		return StatusPass, "", "output equals the expected output"
	default:
		if _, issues, err := e.schema.ValidateLimited(out.output, false, manifest.DefaultValidationBudget, w); err != nil || len(issues) > 0 {
			msg := "not JSON"
			var te *toolerr.Error
			if errors.Is(err, manifest.ErrWorkBudget) || errors.As(err, &te) {
				msg = err.Error() // over the work budget, or stopped
			}
			if len(issues) > 0 {
				var parts []string
				for _, is := range issues {
					p := is.InstancePath
					if p == "" {
						p = "/"
					}
					parts = append(parts, p+" "+is.Message)
				}
				msg = strings.Join(parts, "; ")
			}
			return StatusFail, "", fmt.Sprintf("output %s does not match the case's outputSchema: %s", compact(out.output, 200), msg)
		}
		return StatusPass, "", "output matches the case's outputSchema"
	}
}

// invalidInput returns an input the tool's input schema refuses, and how
// it breaks the schema; nil when every candidate is accepted. Candidates:
// a value of the wrong type at the root, then an object missing its
// required properties.
func invalidInput(mt *manifest.Tool) (json.RawMessage, string) {
	var root map[string]any
	_ = json.Unmarshal(mt.Input, &root)
	candidates := []struct{ v, why string }{
		{`[]`, "wrong type at the root"},
		{`"conformance"`, "wrong type at the root"},
		{`0`, "wrong type at the root"},
		{`null`, "wrong type at the root"},
		{`{}`, "missing required properties"},
		{`{"conformance-unknown-property":true}`, "an unknown property"},
	}
	if t, ok := root["type"].(string); ok && t != "object" {
		candidates[4].why = "wrong type at the root"
	}
	for _, c := range candidates {
		if _, err := mt.ValidateInput([]byte(c.v)); err != nil && toolerr.As(err).Code == toolerr.InputValidationFailed {
			return json.RawMessage(c.v), c.why
		}
	}
	return nil, "the input schema accepts every generated violation (any type, no required property)"
}
