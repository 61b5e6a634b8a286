package events

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"

	"github.com/sandboxd/sandboxd/manifest"
)

// MetaKey is the `_meta` key under which the canonical envelope travels.
const MetaKey = "x.ai/tool"

// MetaVersion is the envelope version sandboxd emits.
const MetaVersion = 1

// Namespace is the namespace sandboxd emits: runtime-registered tools use
// "mcp", and the namespace set is closed, so sandboxd never invents one.
const Namespace = "mcp"

// maxProjectedString is the longest string value projected into Input.
// Longer values are bulky and left out (consumers fall back to raw input).
const maxProjectedString = 4096

// Meta is the canonical `x.ai/tool` envelope. Its fields marshal in the
// canonical order: version, name, kind, namespace, label, read_only, input.
// Input is omitted entirely (never null) when there is no projection.
type Meta struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Label     string `json:"label"`
	ReadOnly  bool   `json:"read_only"`
	Input     *Input `json:"input,omitempty"`
}

// Input is the projection of a validated tool input onto the eight
// canonical fields, in canonical order. An absent field is left out.
// Values are JSON exactly as projected (strings for path, command,
// description, cwd, directory and pattern; integers for offset and limit).
type Input struct {
	Path        json.RawMessage `json:"path,omitempty"`
	Offset      json.RawMessage `json:"offset,omitempty"`
	Limit       json.RawMessage `json:"limit,omitempty"`
	Command     json.RawMessage `json:"command,omitempty"`
	Description json.RawMessage `json:"description,omitempty"`
	Cwd         json.RawMessage `json:"cwd,omitempty"`
	Directory   json.RawMessage `json:"directory,omitempty"`
	Pattern     json.RawMessage `json:"pattern,omitempty"`
}

func (in *Input) empty() bool {
	return in.Path == nil && in.Offset == nil && in.Limit == nil && in.Command == nil &&
		in.Description == nil && in.Cwd == nil && in.Directory == nil && in.Pattern == nil
}

// labels maps every known kind to its label (spec/x-ai-tool-envelope.md).
var labels = map[string]string{
	"read": "Read", "edit": "Edit", "delete": "Delete", "list_dir": "List Files",
	"write": "Write", "move": "Move", "search": "Search", "lsp": "Code Intelligence",
	"execute": "Run Command", "plan": "Plan", "web_search": "Web Search",
	"web_fetch": "Web Fetch", "background_task_action": "Background Task",
	"wait_tasks_action": "Wait for Tasks", "kill_task_action": "Kill Task",
	"workflow": "Workflow", "list": "List Files", "skill": "Skill",
	"memory_search": "Memory Search", "memory_get": "Memory Read", "task": "Subagent",
	"enter_plan": "Enter Plan Mode", "exit_plan": "Exit Plan Mode", "ask_user": "Ask User",
	"image_gen": "Generate Image", "video_gen": "Generate Video",
	"image_to_video": "Generate Video", "reference_to_video": "Generate Video",
	"deploy_app": "Deploy App", "search_tool": "Search Tools", "use_tool": "Use Tool",
	"monitor": "Monitor", "goal_update": "Update Goal", "other": "Tool",
}

// Label returns the label of kind; an unknown kind reads as "other" ("Tool").
func Label(kind string) string {
	if l, ok := labels[kind]; ok {
		return l
	}
	return labels["other"]
}

// NormalizeKind returns kind when it is a known kind and "other" otherwise.
func NormalizeKind(kind string) string {
	if _, ok := labels[kind]; ok {
		return kind
	}
	return "other"
}

// NewMeta returns the envelope for tool m. validatedInput is the input after
// validation (defaults filled); pass nil before validation, and the envelope
// carries no input. The projection follows metadata["x.ai/tool"].input, a
// map from canonical field to a JSON Pointer into the input; without that
// mapping Input is nil. read_only is !mutating (absent mutating → false).
func NewMeta(m *manifest.Manifest, validatedInput []byte) Meta {
	kind, mapping := toolMetadata(m)
	meta := Meta{
		Version:   MetaVersion,
		Name:      m.ID,
		Kind:      kind,
		Namespace: Namespace,
		Label:     Label(kind),
		ReadOnly:  !m.IsMutating(),
	}
	if mapping != nil && len(validatedInput) > 0 {
		meta.Input = Project(validatedInput, mapping)
	}
	return meta
}

// toolMetadata reads metadata["x.ai/tool"]: its kind (normalised) and its
// input mapping (nil when absent or not an object).
func toolMetadata(m *manifest.Manifest) (kind string, mapping map[string]string) {
	kind = "other"
	x, ok := m.Metadata[MetaKey].(map[string]any)
	if !ok {
		return kind, nil
	}
	if k, ok := x["kind"].(string); ok {
		kind = NormalizeKind(k)
	}
	in, ok := x["input"].(map[string]any)
	if !ok {
		return kind, nil
	}
	mapping = map[string]string{}
	for field, ptr := range in {
		if p, ok := ptr.(string); ok {
			mapping[field] = p
		}
	}
	return kind, mapping
}

// Project returns the canonical projection of input (one JSON value)
// through mapping (canonical field → JSON Pointer). Only the eight canonical
// fields are projected; unknown mapping keys are ignored. A pointer that
// resolves to nothing, or to a value of the wrong type (the text fields
// want strings of at most 4 KiB, offset and limit want integers), leaves
// the field out. offset < 0 is dropped and offset 0 becomes 1. Project
// returns nil when nothing was projected or input is not JSON.
func Project(input []byte, mapping map[string]string) *Input {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil
	}
	var in Input
	text := func(field string) json.RawMessage {
		ptr, ok := mapping[field]
		if !ok {
			return nil
		}
		v, ok := resolvePointer(doc, ptr)
		if !ok {
			return nil
		}
		s, ok := v.(string)
		if !ok || len(s) > maxProjectedString {
			return nil
		}
		b, _ := json.Marshal(s)
		return b
	}
	integer := func(field string) (*big.Int, bool) {
		ptr, ok := mapping[field]
		if !ok {
			return nil, false
		}
		v, ok := resolvePointer(doc, ptr)
		if !ok {
			return nil, false
		}
		n, ok := v.(json.Number)
		if !ok {
			return nil, false
		}
		r, ok := new(big.Rat).SetString(string(n))
		if !ok || !r.IsInt() {
			return nil, false
		}
		return r.Num(), true
	}
	in.Path = text("path")
	if n, ok := integer("offset"); ok && n.Sign() >= 0 {
		if n.Sign() == 0 {
			n.SetInt64(1)
		}
		in.Offset = json.RawMessage(n.String())
	}
	if n, ok := integer("limit"); ok {
		in.Limit = json.RawMessage(n.String())
	}
	in.Command = text("command")
	in.Description = text("description")
	in.Cwd = text("cwd")
	in.Directory = text("directory")
	in.Pattern = text("pattern")
	if in.empty() {
		return nil
	}
	return &in
}

// resolvePointer evaluates an RFC 6901 JSON Pointer against doc.
func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
