package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
)

// Source is where a server's tools come from: a Kindgi pack index
// (IndexSource) or a directory of manifests (DirSource). A Source is read
// at boot and again on every reload.
type Source interface {
	// load reads the tool definitions; it does not compile anything.
	load() (*packSpec, []Problem)
}

// Problem is one reason a tool (or the source) could not be loaded: a
// boot-failed or reload-failed event carries one per failure.
type Problem struct {
	// Tool is the tool id, "" for a problem with the source itself.
	Tool string `json:"tool,omitempty"`
	// Path is the file concerned, when there is one.
	Path string `json:"path,omitempty"`
	// Code is the native error code when the executor refused the tool.
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// BootError is returned by New when the source or some of its tools could
// not be loaded. It lists every problem, not just the first.
type BootError struct{ Problems []Problem }

func (e *BootError) Error() string {
	parts := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		s := p.Message
		if p.Tool != "" {
			s = p.Tool + ": " + s
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%d problem(s) loading tools: %s", len(e.Problems), strings.Join(parts, "; "))
}

// packSpec is a source read but not compiled.
type packSpec struct {
	packID, packVersion, artifactVersion string
	requiredEnv                          []string
	hasEnv                               bool
	unsupportedChecks                    []string
	tools                                []toolSpec
}

type toolSpec struct {
	id      string
	version string // the version the caller may pin ("" when none)
	path    string // for problems
	man     []byte
	opts    []executor.LoadOption
}

// IndexSource reads a Kindgi pack index (pack-index.schema.json, envelope
// v1). Each tool's modulePath names its Wasm module under ModuleRoot; a
// modulePath that does not end in .wasm (the source file an indexer
// records, e.g. tools/echo/index.ts) resolves to the .wasm beside it with
// the same base name. Paths never escape ModuleRoot (symlinks included).
// The module is handed to the executor directly: an index is the pack
// service's production input, so no filesystem codeArtifactRef is
// involved and dev mode is not needed.
type IndexSource struct {
	Index      string
	ModuleRoot string
}

// maxModuleBytes caps a module read from the module root.
const maxModuleBytes = 256 << 20

// maxManifestBytes caps a pack index or tool manifest file.
const maxManifestBytes = 16 << 20

type indexDoc struct {
	V               *int                         `json:"v"`
	PackID          string                       `json:"packId"`
	PackVersion     string                       `json:"packVersion"`
	ArtifactVersion string                       `json:"artifactVersion"`
	PublishedAt     string                       `json:"publishedAt"`
	Tools           []indexTool                  `json:"tools"`
	Guardrails      []map[string]json.RawMessage `json:"guardrails"`
	Agents          json.RawMessage              `json:"agents"`
	Flows           json.RawMessage              `json:"flows"`
	Env             *struct {
		Required []string `json:"required"`
		Optional []string `json:"optional"`
	} `json:"env"`
}

type indexTool struct {
	ID          string          `json:"id"`
	Description string          `json:"description"`
	Version     *string         `json:"version"`
	Input       json.RawMessage `json:"input"`
	Output      json.RawMessage `json:"output"`
	Effects     json.RawMessage `json:"effects"`
	Needs       json.RawMessage `json:"needs"`
	NeedsSpec   json.RawMessage `json:"needsSpec"`
	Sandbox     string          `json:"sandbox"`
	Limits      json.RawMessage `json:"limits"`
	Network     json.RawMessage `json:"network"`
	Mutating    *bool           `json:"mutating"`
	Spec        json.RawMessage `json:"spec"`
	ModulePath  string          `json:"modulePath"`
}

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

func (s IndexSource) load() (*packSpec, []Problem) {
	srcProblem := func(format string, args ...any) (*packSpec, []Problem) {
		return nil, []Problem{{Path: s.Index, Message: fmt.Sprintf(format, args...)}}
	}
	b, err := artifact.ReadRegular(s.Index, maxManifestBytes) // never blocks on a FIFO (F13)
	if err != nil {
		return srcProblem("cannot read the pack index: %v", err)
	}
	var doc indexDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return srcProblem("the pack index is not a valid pack-index document: %v", err)
	}
	switch {
	case doc.V == nil || *doc.V != 1:
		return srcProblem("pack index envelope v must be 1")
	case doc.PackID == "" || doc.PackVersion == "" || doc.ArtifactVersion == "":
		return srcProblem("pack index needs non-empty packId, packVersion and artifactVersion")
	case doc.Tools == nil:
		return srcProblem("pack index has no tools array")
	}
	root, err := os.OpenRoot(s.ModuleRoot)
	if err != nil {
		return srcProblem("module root: %v", err)
	}
	defer root.Close()
	spec := &packSpec{packID: doc.PackID, packVersion: doc.PackVersion, artifactVersion: doc.ArtifactVersion}
	if doc.Env != nil {
		spec.requiredEnv, spec.hasEnv = doc.Env.Required, true
	}
	for _, g := range doc.Guardrails {
		var id string
		if json.Unmarshal(g["checkId"], &id) != nil || id == "" {
			_ = json.Unmarshal(g["id"], &id)
		}
		spec.unsupportedChecks = append(spec.unsupportedChecks, id)
	}
	var problems []Problem
	for _, t := range doc.Tools {
		ts, p := indexToolSpec(root, s.ModuleRoot, t)
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		spec.tools = append(spec.tools, ts)
	}
	return spec, problems
}

func indexToolSpec(root *os.Root, rootDir string, t indexTool) (toolSpec, *Problem) {
	bad := func(format string, args ...any) (toolSpec, *Problem) {
		return toolSpec{}, &Problem{Tool: t.ID, Path: t.ModulePath, Message: fmt.Sprintf(format, args...)}
	}
	if t.ID == "" {
		return bad("a tool has no id")
	}
	if t.ModulePath == "" {
		return bad("no modulePath")
	}
	rel := t.ModulePath
	if strings.Contains(rel, "\\") || path.IsAbs(rel) || !fs.ValidPath(rel) {
		return bad("modulePath %q must be a relative forward-slash path inside the module root", rel)
	}
	candidates := []string{rel}
	if ext := path.Ext(rel); ext != ".wasm" {
		candidates = append(candidates, strings.TrimSuffix(rel, ext)+".wasm")
	}
	var wasm []byte
	var tried []string
	for _, c := range candidates {
		f, err := artifact.OpenRegularIn(root, c) // a FIFO must not block the load (F13)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", filepath.Join(rootDir, c), errors.Unwrap(err)))
			continue
		}
		st, err := f.Stat()
		if err == nil && st.Size() > maxModuleBytes {
			err = fmt.Errorf("%d bytes, over the %d-byte module cap", st.Size(), maxModuleBytes)
		}
		if err == nil {
			var buf bytes.Buffer
			_, err = buf.ReadFrom(f)
			wasm = buf.Bytes()
		}
		f.Close()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", filepath.Join(rootDir, c), err))
			wasm = nil
			continue
		}
		break
	}
	if wasm == nil {
		return bad("module not loadable: %s", strings.Join(tried, "; "))
	}
	// The tool as a Kindgi tool manifest: what the executor loads.
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
	if t.Input == nil || t.Output == nil {
		return bad("a tool needs input and output schemas")
	}
	for k, v := range map[string]json.RawMessage{"needsSpec": t.NeedsSpec, "limits": t.Limits, "network": t.Network} {
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
	man, err := json.Marshal(m)
	if err != nil {
		return bad("cannot build its manifest: %v", err)
	}
	return toolSpec{id: t.ID, version: pinned, path: t.ModulePath, man: man, opts: []executor.LoadOption{executor.WithModule(wasm)}}, nil
}

// DirSource reads the tool manifests in Dir: every *.json file in it and
// every DIR/*/tool.json. Filesystem codeArtifactRefs resolve relative to
// the manifest's directory and need dev mode (executor Config.WithDevMode).
// PackID, PackVersion and ArtifactVersion fill /v1/info; they default to
// "sandboxd", "0.0.0" and a digest of the tools' ids and module digests.
type DirSource struct {
	Dir                                  string
	PackID, PackVersion, ArtifactVersion string
}

func (s DirSource) load() (*packSpec, []Problem) {
	var files []string
	for _, pat := range []string{"*.json", "*/tool.json"} {
		m, err := filepath.Glob(filepath.Join(s.Dir, pat))
		if err != nil {
			return nil, []Problem{{Path: s.Dir, Message: err.Error()}}
		}
		files = append(files, m...)
	}
	if st, err := os.Stat(s.Dir); err != nil || !st.IsDir() {
		return nil, []Problem{{Path: s.Dir, Message: "not a readable directory"}}
	}
	sort.Strings(files)
	spec := &packSpec{packID: s.PackID, packVersion: s.PackVersion, artifactVersion: s.ArtifactVersion}
	if spec.packID == "" {
		spec.packID = "sandboxd"
	}
	if spec.packVersion == "" {
		spec.packVersion = "0.0.0"
	}
	var problems []Problem
	for _, f := range files {
		b, err := artifact.ReadRegular(f, maxManifestBytes) // never blocks on a FIFO (F13)
		if err != nil {
			problems = append(problems, Problem{Path: f, Message: err.Error()})
			continue
		}
		id, version := manifestHead(b)
		abs, _ := filepath.Abs(filepath.Dir(f))
		spec.tools = append(spec.tools, toolSpec{id: id, version: version, path: f, man: b,
			opts: []executor.LoadOption{executor.WithBaseDir(abs)}})
	}
	if len(files) == 0 {
		problems = append(problems, Problem{Path: s.Dir, Message: "no tool manifests (*.json or */tool.json)"})
	}
	return spec, problems
}

// catalog is one loaded generation of tools. Calls hold a reference; a
// retired catalog closes its tools when the last call releases it.
type catalog struct {
	packID, packVersion, artifactVersion string
	requiredEnv                          []string
	hasEnv                               bool
	unsupportedChecks                    []string
	tools                                map[string]*entry
	order                                []string

	mu      sync.Mutex
	refs    int
	retired bool
}

// entry is one loaded tool.
type entry struct {
	tool     *executor.Tool
	version  string // pinned version callers compare against
	inflight chan struct{}

	spec       []byte // the manifest it was loaded from
	schemaOnce sync.Once
	schema     *manifest.Tool // compiled on first use by validated (core.go)
}

// loadCatalog compiles every tool of src. Any problem fails the whole load
// (and closes what was loaded): a pack service serves its index entirely
// or not at all.
func loadCatalog(ctx context.Context, exec *executor.Executor, src Source, perTool int) (*catalog, []Problem) {
	spec, problems := src.load()
	if spec == nil {
		return nil, problems
	}
	c := &catalog{packID: spec.packID, packVersion: spec.packVersion, artifactVersion: spec.artifactVersion,
		requiredEnv: spec.requiredEnv, hasEnv: spec.hasEnv, unsupportedChecks: spec.unsupportedChecks, tools: map[string]*entry{}}
	h := sha256.New()
	for _, ts := range spec.tools {
		t, err := exec.Load(ctx, ts.man, ts.opts...)
		if err != nil {
			var code string
			msg := err.Error()
			if te := asToolErr(err); te != nil {
				code, msg = string(te.Code), te.Message
			}
			problems = append(problems, Problem{Tool: ts.id, Path: ts.path, Code: code, Message: msg})
			continue
		}
		if _, dup := c.tools[t.ID()]; dup {
			problems = append(problems, Problem{Tool: t.ID(), Path: ts.path, Message: "duplicate tool id"})
			_ = t.Close(ctx)
			continue
		}
		c.tools[t.ID()] = &entry{tool: t, version: ts.version, inflight: make(chan struct{}, perTool), spec: ts.man}
		c.order = append(c.order, t.ID())
		fmt.Fprintf(h, "%s %s\n", t.ID(), t.Digest())
	}
	if len(problems) > 0 {
		c.close(ctx)
		return nil, problems
	}
	sort.Strings(c.order)
	if c.artifactVersion == "" {
		c.artifactVersion = "sha256-" + hex.EncodeToString(h.Sum(nil))[:16]
	}
	return c, nil
}

func (c *catalog) close(ctx context.Context) {
	for _, e := range c.tools {
		_ = e.tool.Close(ctx)
	}
}

// hold takes another reference on a catalog the caller already holds.
func (c *catalog) hold() {
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
}

// acquire takes a reference; false when the catalog is retired.
func (c *catalog) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return false
	}
	c.refs++
	return true
}

func (c *catalog) release() {
	c.mu.Lock()
	c.refs--
	last := c.retired && c.refs == 0
	c.mu.Unlock()
	if last {
		c.close(context.Background())
	}
}

// retire marks c replaced; its tools close once no call holds it.
func (c *catalog) retire() {
	c.mu.Lock()
	c.retired = true
	idle := c.refs == 0
	c.mu.Unlock()
	if idle {
		c.close(context.Background())
	}
}

// missingEnv lists the required env names this process lacks, sorted.
func (c *catalog) missingEnv() []string {
	var out []string
	for _, n := range c.requiredEnv {
		if os.Getenv(n) == "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// manifestHead reads a manifest's id and version without validating it
// (the executor does that).
func manifestHead(b []byte) (id, version string) {
	var head struct {
		ID      string `json:"id"`
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &head)
	return head.ID, head.Version
}
