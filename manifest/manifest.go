package manifest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Manifest is a parsed tool manifest (Kindgi tool schema 1.1.0, see
// spec/kindgi-tool.schema.json). Fields mirror the document; a
// pointer or slice field is nil and a string field "" when the document
// lacks it. A Manifest returned by Parse has passed the tool schema.
// Callers must not modify it while it is shared.
type Manifest struct {
	ID, Description, Version string
	// Input and Output are the tool's JSON Schemas, exactly as written.
	Input, Output json.RawMessage
	// Sandbox is the declared posture, "" when absent (see Posture).
	Sandbox Posture
	// Mutating is nil when absent; the manifest format reads absent as true.
	Mutating  *bool
	Limits    *Limits
	Network   *Network
	NeedsSpec *NeedsSpec
	// CodeArtifactRef points at the handler's Wasm module.
	CodeArtifactRef *ArtifactRef
	// Spec is the declarative handler spec (kind "http"), exactly as written.
	Spec json.RawMessage
	// Transport is "auto", "native" or "mcp"; "" when absent (meaning auto).
	Transport string
	// MCPEndpoint is the MCP endpoint URI, "" when absent.
	MCPEndpoint string
	// Needs and Effects are the declarative needs and side effects.
	Needs   []Need
	Effects []Effect
	// Metadata holds free-form annotations. Numbers are json.Number.
	Metadata map[string]any
	// Raw is the whole document as given (a copy of Parse's input).
	Raw json.RawMessage
}

// Posture is a tool's sandbox posture (docs/DESIGN.md "Sandbox posture").
type Posture string

// The postures of the manifest's sandbox field.
const (
	PostureNone            Posture = "none"
	PostureContextIsolated Posture = "context-isolated"
	PostureStrict          Posture = "strict"
)

// Posture returns the declared sandbox posture, or PostureContextIsolated
// when the manifest has none.
func (m *Manifest) Posture() Posture {
	if m.Sandbox == "" {
		return PostureContextIsolated
	}
	return m.Sandbox
}

// IsMutating reports whether the tool declares side effects; an absent
// mutating field counts as true.
func (m *Manifest) IsMutating() bool { return m.Mutating == nil || *m.Mutating }

// Limits are the resource caps of a manifest's limits field (both at least 1).
type Limits struct {
	MemMB int64 `json:"memMB"`
	CPUMs int64 `json:"cpuMs"`
}

// Network is a manifest's egress policy: Kind "none", "unrestricted" or
// "allowlist" (with Hosts, not yet checked against the egress grammar).
type Network struct {
	Kind  string   `json:"kind"`
	Hosts []string `json:"hosts,omitempty"`
}

// NeedsSpec is a manifest's typed needs. Env, Secrets and Config map a name
// to the JSON Schema of its value, exactly as written (see CompileSchema).
type NeedsSpec struct {
	Env          map[string]json.RawMessage `json:"env,omitempty"`
	Secrets      map[string]json.RawMessage `json:"secrets,omitempty"`
	Config       map[string]json.RawMessage `json:"config,omitempty"`
	Capabilities []string                   `json:"capabilities,omitempty"`
	Bindings     []string                   `json:"bindings,omitempty"`
}

// ArtifactRef is a manifest's codeArtifactRef. Kind is "oci" (ImageRef,
// ModulePath and ArtifactVersion set) or "filesystem" (ModulePath set).
type ArtifactRef struct {
	Kind            string `json:"kind"`
	ImageRef        string `json:"imageRef,omitempty"`
	ModulePath      string `json:"modulePath"`
	ArtifactVersion string `json:"artifactVersion,omitempty"`
}

// SplitModulePath splits a codeArtifactRef.modulePath into the module's path
// and the export its "#NAME" suffix names ("" without one), so that one
// module can back several tools (an Extism plug-in's exports).
func SplitModulePath(modulePath string) (path, entry string) {
	if i := strings.LastIndexByte(modulePath, '#'); i >= 0 {
		return modulePath[:i], modulePath[i+1:]
	}
	return modulePath, ""
}

// Need is one entry of a manifest's needs.
type Need struct {
	Name     string `json:"name"`
	Optional bool   `json:"optional,omitempty"`
}

// Effect is one entry of a manifest's effects.
type Effect struct {
	Kind     string `json:"kind"`
	Resource string `json:"resource,omitempty"`
	Notes    string `json:"notes,omitempty"`
}

//go:embed tool.schema.json
var toolSchemaJSON []byte

// toolSchema is the embedded Kindgi tool schema, compiled once.
var toolSchema = sync.OnceValue(func() *Schema {
	d, err := decodeJSON(toolSchemaJSON, decodeOpts{rejectDuplicates: true})
	if err != nil {
		panic("manifest: embedded tool schema: " + err.Error())
	}
	s, err := compileSchema("", d.v, only2020)
	if err != nil {
		panic("manifest: embedded tool schema: " + err.Error())
	}
	return s
})

// Parse decodes data and validates it against the embedded Kindgi tool
// schema (draft 2020-12). It does not compile the input and output schemas
// (Load does).
//
// data must be exactly one JSON object (whitespace around it is fine). A
// repeated object key anywhere in the document is refused: two readers of
// the same manifest must never disagree on what it says.
//
// Every failure is a *toolerr.Error with Code toolerr.InvalidToolDefinition
// whose message names the first problem. For a document that breaks the
// tool schema, Issues lists every problem in Ajv's shape, instancePath
// relative to the manifest root. Parse does not retain data.
func Parse(data []byte) (*Manifest, error) {
	m, _, err := parse(data)
	return m, err
}

// parse returns the manifest and its decoded document (for Load, so that
// the input and output schemas are not decoded twice).
func parse(data []byte) (*Manifest, map[string]any, error) {
	raw := bytes.Clone(data)
	d, err := decodeJSON(raw, decodeOpts{maxDepth: maxSchemaDepth, rejectDuplicates: true, spanDepth: 3})
	if err != nil {
		return nil, nil, &toolerr.Error{Code: toolerr.InvalidToolDefinition, Message: jsonProblem("manifest", err), Err: err}
	}
	id, _ := lookup(d.v, []string{"id"}).(string)
	if issues, err := toolSchema().validateTree(d.v); err != nil || len(issues) > 0 {
		if err != nil {
			return nil, nil, (&toolerr.Error{Code: toolerr.InvalidToolDefinition, Message: "manifest: " + err.Error(), Err: err}).WithTool(id)
		}
		return nil, nil, (&toolerr.Error{
			Code:    toolerr.InvalidToolDefinition,
			Message: "invalid tool manifest: " + joinFirst(explain("manifest", d.v, toolSchemaDoc(), issues)),
			Issues:  issues,
		}).WithTool(id)
	}
	obj := d.v.(map[string]any) // the tool schema requires an object
	m := &Manifest{
		ID:          obj["id"].(string),
		Description: obj["description"].(string),
		Version:     obj["version"].(string),
		Input:       spanOf(raw, d, "/input"),
		Output:      spanOf(raw, d, "/output"),
		Spec:        spanOf(raw, d, "/spec"),
		Raw:         raw,
	}
	m.Sandbox = Posture(str(obj["sandbox"]))
	m.Transport = str(obj["transport"])
	m.MCPEndpoint = str(obj["mcpEndpoint"])
	if b, ok := obj["mutating"].(bool); ok {
		m.Mutating = &b
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		m.Metadata = meta
	}
	if l, ok := obj["limits"].(map[string]any); ok {
		m.Limits = &Limits{}
		for _, f := range []struct {
			name string
			dst  *int64
		}{{"memMB", &m.Limits.MemMB}, {"cpuMs", &m.Limits.CPUMs}} {
			n, ok := int64Of(l[f.name])
			if !ok {
				return nil, nil, (&toolerr.Error{
					Code:    toolerr.InvalidToolDefinition,
					Message: fmt.Sprintf("invalid tool manifest: manifest/limits/%s is out of range", f.name),
					Details: map[string]any{"pointer": "/limits/" + f.name},
				}).WithTool(id)
			}
			*f.dst = n
		}
	}
	if n, ok := obj["network"].(map[string]any); ok {
		m.Network = &Network{Kind: str(n["kind"]), Hosts: strs(n["hosts"])}
	}
	if n, ok := obj["needsSpec"].(map[string]any); ok {
		m.NeedsSpec = &NeedsSpec{
			Env:          rawMap(raw, d, "/needsSpec/env", n["env"]),
			Secrets:      rawMap(raw, d, "/needsSpec/secrets", n["secrets"]),
			Config:       rawMap(raw, d, "/needsSpec/config", n["config"]),
			Capabilities: strs(n["capabilities"]),
			Bindings:     strs(n["bindings"]),
		}
	}
	if a, ok := obj["codeArtifactRef"].(map[string]any); ok {
		m.CodeArtifactRef = &ArtifactRef{
			Kind:            str(a["kind"]),
			ImageRef:        str(a["imageRef"]),
			ModulePath:      str(a["modulePath"]),
			ArtifactVersion: str(a["artifactVersion"]),
		}
	}
	if ns, ok := obj["needs"].([]any); ok {
		for _, n := range ns {
			n := n.(map[string]any)
			opt, _ := n["optional"].(bool)
			m.Needs = append(m.Needs, Need{Name: str(n["name"]), Optional: opt})
		}
	}
	if es, ok := obj["effects"].([]any); ok {
		for _, e := range es {
			e := e.(map[string]any)
			m.Effects = append(m.Effects, Effect{Kind: str(e["kind"]), Resource: str(e["resource"]), Notes: str(e["notes"])})
		}
	}
	return m, obj, nil
}

// jsonProblem describes a document the decoder refused.
func jsonProblem(what string, err error) string {
	var se *syntaxError
	if errors.As(err, &se) && se.valid() {
		return what + " is refused: " + err.Error()
	}
	return what + " is not valid JSON: " + err.Error()
}

// summarize renders the first issues as Ajv's errorsText does
// ("manifest/version must match pattern ..."), counting the rest.
func summarize(dataVar string, issues []toolerr.Issue) string {
	const shown = 3
	if len(issues) == 0 {
		return dataVar + " is invalid"
	}
	var sb strings.Builder
	for i, is := range issues[:min(shown, len(issues))] {
		if i > 0 {
			sb.WriteString("; ")
		}
		sb.WriteString(dataVar + is.InstancePath + " " + is.Message)
		if p, ok := is.Params["additionalProperty"].(string); ok {
			fmt.Fprintf(&sb, " (%q)", p)
		}
	}
	sb.WriteString(moreProblems(len(issues) - shown))
	return sb.String()
}

// joinFirst joins the first three lines with "; ", counting the rest.
func joinFirst(lines []string) string {
	const shown = 3
	if len(lines) == 0 {
		return "manifest is invalid"
	}
	return strings.Join(lines[:min(shown, len(lines))], "; ") + moreProblems(len(lines)-shown)
}

func moreProblems(n int) string {
	switch {
	case n == 1:
		return " (and 1 more problem)"
	case n > 1:
		return fmt.Sprintf(" (and %d more problems)", n)
	}
	return ""
}

func spanOf(raw []byte, d *decoded, ptr string) json.RawMessage {
	sp, ok := d.spans[ptr]
	if !ok {
		return nil
	}
	return json.RawMessage(raw[sp.start:sp.end:sp.end])
}

func rawMap(raw []byte, d *decoded, ptr string, v any) map[string]json.RawMessage {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]json.RawMessage, len(obj))
	for k, val := range obj {
		if r := spanOf(raw, d, ptr+"/"+escapePointerToken(k)); r != nil {
			out[k] = r
		} else {
			out[k] = encodeJSON(val)
		}
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	a, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		out = append(out, str(e))
	}
	return out
}

// int64Of converts a JSON integer (which may be written 1e3 or 5.0) to int64.
func int64Of(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}
