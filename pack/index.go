package pack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/toolerr"
)

// IndexTool is a pack index tool entry (pack-index.schema.json
// $defs/tool).
type IndexTool struct {
	ID          string          `json:"id"`
	Description string          `json:"description,omitempty"`
	Version     *string         `json:"version,omitempty"`
	Input       json.RawMessage `json:"input"`
	Output      json.RawMessage `json:"output"`
	Effects     json.RawMessage `json:"effects,omitempty"`
	Needs       json.RawMessage `json:"needs,omitempty"`
	NeedsSpec   json.RawMessage `json:"needsSpec,omitempty"`
	Sandbox     string          `json:"sandbox,omitempty"`
	Limits      json.RawMessage `json:"limits,omitempty"`
	Network     json.RawMessage `json:"network,omitempty"`
	Mutating    *bool           `json:"mutating,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty"`
	ModulePath  string          `json:"modulePath"`
}

// IndexGuardrail is a pack index guardrail entry (pack-index.schema.json
// $defs/guardrail): a guardrail whose check is pack code.
type IndexGuardrail struct {
	ID              string          `json:"id"`
	Name            string          `json:"name,omitempty"`
	Kind            string          `json:"kind"`
	Action          json.RawMessage `json:"action"`
	Severity        string          `json:"severity,omitempty"`
	Scope           json.RawMessage `json:"scope,omitempty"`
	CheckModulePath string          `json:"checkModulePath"`
	CheckID         string          `json:"checkId,omitempty"`
	ConfigSchema    json.RawMessage `json:"configSchema,omitempty"`
	Config          json.RawMessage `json:"config,omitempty"`
	Sandbox         string          `json:"sandbox,omitempty"`
	Limits          json.RawMessage `json:"limits,omitempty"`
	Network         json.RawMessage `json:"network,omitempty"`
}

// Index is a decoded pack index (index.json, envelope v1).
type Index struct {
	V               int               `json:"v"`
	PackID          string            `json:"packId"`
	PackVersion     string            `json:"packVersion"`
	ArtifactVersion string            `json:"artifactVersion"`
	PublishedAt     string            `json:"publishedAt"`
	Tools           []IndexTool       `json:"tools"`
	Guardrails      []IndexGuardrail  `json:"guardrails"`
	Agents          []json.RawMessage `json:"agents"`
	Flows           []json.RawMessage `json:"flows"`
	Env             *Env              `json:"env,omitempty"`
}

// ParseIndex decodes a pack index as a pack service reads it: one JSON
// object, envelope v 1, no field outside pack-index.schema.json 1.4.0 (at
// the top level and in tool and guardrail entries), non-empty packId,
// packVersion and artifactVersion, and a tools array. Entries are checked
// when they are read (IndexSource.Read); ValidateIndex checks the whole
// schema.
func ParseIndex(data []byte) (*Index, error) {
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("the pack index is not a JSON object: %v", err)
	}
	if head.V == nil || string(*head.V) != "1" {
		return nil, fmt.Errorf("pack index envelope v must be 1")
	}
	var ix Index
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ix); err != nil {
		return nil, fmt.Errorf("the pack index is not a valid pack-index document: %v", err)
	}
	switch {
	case ix.PackID == "" || ix.PackVersion == "" || ix.ArtifactVersion == "":
		return nil, fmt.Errorf("pack index needs non-empty packId, packVersion and artifactVersion")
	case ix.Tools == nil:
		return nil, fmt.Errorf("pack index has no tools array")
	}
	return &ix, nil
}

// ValidateIndex validates data against the embedded pack-index schema
// 1.4.0 (what an indexer must emit: publishedAt a date-time, every list
// present, env names not KINDGI_*, …) and returns one line per violation,
// nil when it is valid.
func ValidateIndex(data []byte) ([]string, error) {
	return validateAgainst(indexSchemaURL, data)
}

// IndexSource names the files of a pack index pack.
type IndexSource struct {
	// Index is the index.json file.
	Index string
	// ModuleRoot is the directory modulePath and checkModulePath resolve
	// under (never escaped, symlinks included).
	ModuleRoot string
	// BundleMap maps modulePaths to files under ModuleRoot (may be nil).
	BundleMap BundleMap
	// Verify, when set, is called with the exact bytes of the index before
	// they are parsed (a deploy envelope's check, deployenv.Verify): an
	// error refuses the whole index, its Code (a Coder's) kept.
	Verify func(index []byte) error
}

// A Coder is an error with a code (deployenv.Error, toolerr.Error).
type Coder interface{ ErrorCode() string }

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

// Read reads the index and every module it names. The Pack is nil when
// the index itself cannot be read; otherwise it holds every entry that
// could be read, and problems list the others (a pack service serves its
// index entirely or not at all, so a caller booting from it fails on any
// problem; a conformance run reports each).
func (s IndexSource) Read() (*Pack, []Problem) {
	srcProblem := func(format string, args ...any) (*Pack, []Problem) {
		return nil, []Problem{{Path: s.Index, Message: fmt.Sprintf(format, args...)}}
	}
	b, err := artifact.ReadRegular(s.Index, MaxFileBytes) // never blocks on a FIFO (F13)
	if err != nil {
		return srcProblem("cannot read the pack index: %v", err)
	}
	if s.Verify != nil {
		if p := verifyIndex(s.Verify, b, s.Index); p != nil {
			return nil, []Problem{*p}
		}
	}
	ix, err := ParseIndex(b)
	if err != nil {
		return srcProblem("%v", err)
	}
	root, err := os.OpenRoot(s.ModuleRoot)
	if err != nil {
		return srcProblem("module root: %v", err)
	}
	defer root.Close()
	p, problems := readEntries(ix, s.Index, rootFiles{root: root, dir: s.ModuleRoot}, s.BundleMap)
	return p, problems
}

// verifyIndex runs verify on the index bytes b (read from where): nil
// when it passes, else the problem, with a Coder's code.
func verifyIndex(verify func([]byte) error, b []byte, where string) *Problem {
	err := verify(b)
	if err == nil {
		return nil
	}
	p := Problem{Path: where, Message: err.Error()}
	var c Coder
	if errors.As(err, &c) {
		p.Code = toolerr.Code(c.ErrorCode())
		p.Message = strings.TrimPrefix(p.Message, c.ErrorCode()+": ")
	}
	return &p
}

// readEntries reads the tools and guardrail checks of ix (read from the
// file named index), their modules from files through bm.
func readEntries(ix *Index, index string, files moduleFiles, bm BundleMap) (*Pack, []Problem) {
	p := &Pack{ID: ix.PackID, Version: ix.PackVersion, ArtifactVersion: ix.ArtifactVersion,
		PublishedAt: ix.PublishedAt, Env: ix.Env, Layout: LayoutIndex}
	var problems []Problem
	// One read per file, however many entries name it: an index of up to
	// MaxFileBytes can name one large module in ~100k entries.
	files = &sharedFiles{files: files, read1: map[string]sharedRead{}}
	for i, t := range ix.Tools {
		src := fmt.Sprintf("%s#/tools/%d", index, i)
		tool, err := indexTool(files, bm, t, src)
		if err != nil {
			problems = append(problems, problemOf(t.ID, t.ModulePath, err))
			continue
		}
		p.Tools = append(p.Tools, tool)
	}
	for i, g := range ix.Guardrails {
		src := fmt.Sprintf("%s#/guardrails/%d", index, i)
		c, err := indexCheck(files, bm, g, src)
		if err != nil {
			problems = append(problems, problemOf(c.ID, g.CheckModulePath, err))
			continue
		}
		p.Checks = append(p.Checks, c)
	}
	problems = append(problems, p.finish()...)
	return p, problems
}

// sharedFiles reads each file of files once: later reads of the same
// name (and cap) return the same bytes, or the same error. Readers must not
// modify the bytes (a pack's modules are read-only).
type sharedFiles struct {
	files moduleFiles
	read1 map[string]sharedRead
}

type sharedRead struct {
	max int64
	b   []byte
	err error
}

func (s *sharedFiles) read(name string, max int64) ([]byte, error) {
	if r, ok := s.read1[name]; ok && r.max == max {
		return r.b, r.err
	}
	b, err := s.files.read(name, max)
	s.read1[name] = sharedRead{max: max, b: b, err: err}
	return b, err
}

func (s *sharedFiles) where(name string) string { return s.files.where(name) }

func indexTool(files moduleFiles, bm BundleMap, t IndexTool, src string) (Tool, error) {
	wasm, file, err := readModule(files, t.ModulePath, bm)
	if err != nil {
		return Tool{}, err
	}
	version, pinned := "0.0.0", ""
	if t.Version != nil {
		pinned = *t.Version
		if semver.MatchString(*t.Version) {
			version = *t.Version
		}
	}
	desc := t.Description
	if desc == "" {
		desc = "Tool " + t.ID + "."
	}
	m := map[string]any{
		"id": t.ID, "version": version, "description": desc,
		"input": t.Input, "output": t.Output,
		"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": t.ModulePath},
	}
	for k, v := range map[string]json.RawMessage{"needsSpec": t.NeedsSpec, "limits": t.Limits, "network": t.Network,
		"effects": t.Effects, "needs": t.Needs} {
		if v != nil {
			m[k] = v
		}
	}
	if t.Sandbox != "" {
		m["sandbox"] = t.Sandbox
	}
	if t.Mutating != nil {
		m["mutating"] = *t.Mutating
	}
	return Tool{ID: t.ID, Version: pinned, Source: src, Manifest: marshal(m), Module: wasm, ModuleFile: file}, nil
}

func indexCheck(files moduleFiles, bm BundleMap, g IndexGuardrail, src string) (Check, error) {
	decl := guardrailDecl{
		id: g.ID, checkID: g.CheckID, name: g.Name, kind: g.Kind, severity: g.Severity, sandbox: g.Sandbox,
		action: g.Action, config: g.Config, configSchema: g.ConfigSchema,
		limits: g.Limits, network: g.Network,
		artifactRef: marshal(map[string]any{"kind": "filesystem", "modulePath": g.CheckModulePath}),
		source:      src,
	}
	wasm, file, err := readModule(files, g.CheckModulePath, bm)
	if err != nil {
		c, _ := newCheck(decl)
		return c, err
	}
	decl.module, decl.moduleFile = wasm, file
	return newCheck(decl)
}

// finish sorts the pack's entries by id and reports duplicate ids (a tool
// id and a check id may coincide: they are resolved by different message
// kinds).
func (p *Pack) finish() []Problem {
	var problems []Problem
	sort.SliceStable(p.Tools, func(i, j int) bool { return p.Tools[i].ID < p.Tools[j].ID })
	sort.SliceStable(p.Checks, func(i, j int) bool { return p.Checks[i].ID < p.Checks[j].ID })
	dedupe := func(n int, id func(int) string, src func(int) string, what string) []int {
		var drop []int
		for i := 1; i < n; i++ {
			if id(i) == id(i-1) {
				problems = append(problems, Problem{ID: id(i), Path: src(i), Code: toolerr.InvalidToolDefinition, Message: fmt.Sprintf("duplicate %s id: %s declares it too", what, src(i-1))})
				drop = append(drop, i)
			}
		}
		return drop
	}
	for k, i := range dedupe(len(p.Tools), func(i int) string { return p.Tools[i].ID }, func(i int) string { return p.Tools[i].Source }, "tool") {
		p.Tools = append(p.Tools[:i-k], p.Tools[i-k+1:]...)
	}
	for k, i := range dedupe(len(p.Checks), func(i int) string { return p.Checks[i].ID }, func(i int) string { return p.Checks[i].Source }, "check") {
		p.Checks = append(p.Checks[:i-k], p.Checks[i-k+1:]...)
	}
	return problems
}
