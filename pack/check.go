package pack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Check is a guardrail check that is pack code, made an ordinary tool: its
// Tool.Manifest is a synthesized Kindgi tool manifest whose id is the check
// id, whose input is {"config": object, "trace": any} (InputSchema) and
// whose output is the check result (ResultSchema: passed boolean required,
// reason and judgeResponse strings, attributes object, open beyond them).
// The executor loads, limits, sandboxes and validates it exactly as any
// tool; a result without a boolean passed is output-validation-failed.
//
// The config is not in the manifest's input schema: Kindgi validates it
// against configSchema as sent, without filling defaults, and the executor
// fills defaults into every input. So callers build the input with Input,
// which validates the config first, and pass it to the tool.
type Check struct {
	Tool
	// Guardrail is the guardrail's id; Tool.ID is the check id (checkId,
	// else the guardrail id): what a check-invoke names.
	Guardrail string
	// Kind, Severity and Action are the guardrail's, as declared.
	Kind, Severity string
	Action         json.RawMessage
	// Config is the config the guardrail is declared with (nil if none).
	Config json.RawMessage
	// ConfigSchema is the guardrail's configSchema (nil if none).
	ConfigSchema json.RawMessage

	config *manifest.Schema
}

// InputSchema is the synthesized input schema of every check tool.
const InputSchema = `{"type":"object","required":["config","trace"],"additionalProperties":false,"properties":{"config":{"type":"object"},"trace":true}}`

// ResultSchema is the synthesized output schema of every check tool: the
// pack protocol's CheckResult.
const ResultSchema = `{"type":"object","required":["passed"],"properties":{"passed":{"type":"boolean"},"reason":{"type":"string"},"judgeResponse":{"type":"string"},"attributes":{"type":"object"}}}`

// guardrailDecl is what a check is built from: an index guardrail entry or
// a pack.json guardrail, reduced to the fields a check needs.
type guardrailDecl struct {
	id, checkID, name, kind, severity, sandbox string
	action, config, configSchema               json.RawMessage
	limits, network, needsSpec, artifactRef    json.RawMessage
	module                                     []byte
	moduleFile, source, baseDir                string
}

// newCheck synthesizes the check's manifest and compiles its configSchema.
// A configSchema that does not compile is a problem at load (Kindgi finds
// it only on the first call).
func newCheck(g guardrailDecl) (Check, error) {
	id := g.checkID
	if id == "" {
		id = g.id
	}
	c := Check{
		Tool:      Tool{ID: id, Source: g.source, Module: g.module, ModuleFile: g.moduleFile, BaseDir: g.baseDir},
		Guardrail: g.id, Kind: g.kind, Severity: g.severity, Action: g.action,
		Config: g.config, ConfigSchema: g.configSchema,
	}
	if id == "" {
		return c, fmt.Errorf("a guardrail has no id")
	}
	if len(g.configSchema) > 0 {
		s, err := manifest.CompileSchema("/configSchema", g.configSchema)
		if err != nil {
			return c, fmt.Errorf("configSchema: %s", toolerr.As(err).Message)
		}
		c.config = s
	}
	name := g.name
	if name == "" {
		name = g.id
	}
	m := map[string]any{
		"id": id, "version": "0.0.0",
		"description": fmt.Sprintf("Guardrail check %s (guardrail %s, %s).", id, name, g.kind),
		"input":       json.RawMessage(InputSchema), "output": json.RawMessage(ResultSchema),
		"metadata": map[string]any{"sandboxd.check": map[string]any{"guardrail": g.id}},
	}
	for k, v := range map[string]json.RawMessage{"limits": g.limits, "network": g.network, "needsSpec": g.needsSpec, "codeArtifactRef": g.artifactRef} {
		if len(v) > 0 {
			m[k] = v
		}
	}
	if g.sandbox != "" {
		m["sandbox"] = g.sandbox
	}
	c.Manifest = marshal(m)
	if _, err := manifest.Parse(c.Manifest); err != nil {
		return c, fmt.Errorf("its check cannot be a tool: %s", toolerr.As(err).Message)
	}
	return c, nil
}

// Input validates config against the check's configSchema as sent (no
// defaults filled, as Kindgi's pack service does) and returns the tool
// input {"config":…,"trace":…}. A config that is not a JSON object, or
// breaks the schema, is input-validation-failed with Ajv-shaped issues and
// Kindgi's message: `Check "<id>" config failed validation at <path>:
// <first message>`. A nil trace is sent as null. It validates within the
// default work budget (manifest.DefaultWorkLimit), with no deadline: a
// call's config is validated with InputLimited.
func (c *Check) Input(config, trace json.RawMessage) ([]byte, error) {
	return c.InputLimited(config, trace, manifest.Work{})
}

// InputLimited is Input spending at most w on the config's validation
// (manifest.Schema.ValidateLimited): over w.Limit, input-validation-failed
// naming the budget; an error from w.Check is returned as is (a
// *toolerr.Error such as deadline-exceeded or cancelled).
func (c *Check) InputLimited(config, trace json.RawMessage, w manifest.Work) ([]byte, error) {
	cfg := bytes.TrimSpace(config)
	if len(cfg) == 0 || cfg[0] != '{' || !json.Valid(cfg) {
		return nil, &toolerr.Error{Code: toolerr.InputValidationFailed, ToolID: c.ID,
			Message: fmt.Sprintf("Check %q config failed validation at /: must be object", c.ID),
			Issues:  []toolerr.Issue{{InstancePath: "", SchemaPath: "#/type", Keyword: "type", Params: map[string]any{"type": "object"}, Message: "must be object"}}}
	}
	if c.config != nil {
		_, issues, err := c.config.ValidateLimited(cfg, false, manifest.DefaultValidationBudget, w)
		var te *toolerr.Error
		if errors.As(err, &te) {
			return nil, te.WithTool(c.ID)
		}
		if err != nil {
			return nil, &toolerr.Error{Code: toolerr.InputValidationFailed, ToolID: c.ID, Err: err,
				Message: fmt.Sprintf("Check %q config failed validation at /: %v", c.ID, err)}
		}
		if len(issues) > 0 {
			at := issues[0].InstancePath
			if at == "" {
				at = "/"
			}
			return nil, &toolerr.Error{Code: toolerr.InputValidationFailed, ToolID: c.ID, Issues: issues,
				Message: fmt.Sprintf("Check %q config failed validation at %s: %s", c.ID, at, issues[0].Message)}
		}
	}
	tr := bytes.TrimSpace(trace)
	if len(tr) == 0 {
		tr = []byte("null")
	} else if !json.Valid(tr) {
		return nil, toolerr.New(toolerr.InputValidationFailed, "Check %q trace is not JSON", c.ID).WithTool(c.ID)
	}
	var b bytes.Buffer
	b.Grow(len(cfg) + len(tr) + 22)
	b.WriteString(`{"config":`)
	b.Write(cfg)
	b.WriteString(`,"trace":`)
	b.Write(tr)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ValidateConfig checks the guardrail's own declared config against its
// configSchema (what a Kindgi runtime does when it registers the
// guardrail); nil when there is no config or no schema.
func (c *Check) ValidateConfig() error {
	if c.Config == nil {
		return nil
	}
	_, err := c.Input(c.Config, nil)
	return err
}
