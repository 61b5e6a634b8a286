package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/pack"
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
	tools                                []toolSpec
	checks                               []toolSpec // guardrail checks, each with check set
}

type toolSpec struct {
	id      string
	version string // the version the caller may pin ("" when none)
	path    string // for problems
	man     []byte
	opts    []executor.LoadOption
	check   *pack.Check // a guardrail check: its tool id is the check id
}

// IndexSource reads a Kindgi pack index (pack-index.schema.json 1.4.0,
// envelope v1) with package pack: its tools and its guardrail checks. Each
// modulePath and checkModulePath names a file under ModuleRoot, through
// BundleMap when it maps it; a path that does not end in .wasm (the source
// file an indexer records, e.g. tools/echo/index.ts) resolves to the .wasm
// beside it with the same base name. A #NAME suffix (an Extism plug-in's
// export) names no file: it stays in the tool's manifest for the executor,
// so one module can back several tools. Paths never escape ModuleRoot
// (symlinks included). The modules are handed to the executor directly: an
// index is the pack service's production input, so no filesystem
// codeArtifactRef is involved and dev mode is not needed.
//
// Verify, when set, is given the index's exact bytes on every load (boot
// and reload) before they are parsed; an error refuses the load (a deploy
// envelope's verification: its code becomes the Problem's).
type IndexSource struct {
	Index      string
	ModuleRoot string
	BundleMap  pack.BundleMap
	Verify     func(index []byte) error
}

func (s IndexSource) load() (*packSpec, []Problem) {
	p, problems := pack.IndexSource{Index: s.Index, ModuleRoot: s.ModuleRoot, BundleMap: s.BundleMap, Verify: s.Verify}.Read()
	if p == nil {
		return nil, serverProblems(problems)
	}
	spec := &packSpec{packID: p.ID, packVersion: p.Version, artifactVersion: p.ArtifactVersion}
	if p.Env != nil {
		spec.requiredEnv, spec.hasEnv = p.Env.Required, true
	}
	spec.addPack(p)
	return spec, serverProblems(problems)
}

// addPack adds the tools and checks package pack read.
func (spec *packSpec) addPack(p *pack.Pack) {
	opts := func(t pack.Tool) []executor.LoadOption {
		if t.Module != nil {
			return []executor.LoadOption{executor.WithModule(t.Module)}
		}
		return []executor.LoadOption{executor.WithBaseDir(t.BaseDir)}
	}
	for _, t := range p.Tools {
		spec.tools = append(spec.tools, toolSpec{id: t.ID, version: t.Version, path: t.Source, man: t.Manifest, opts: opts(t)})
	}
	for i := range p.Checks {
		c := &p.Checks[i]
		spec.checks = append(spec.checks, toolSpec{id: c.ID, path: c.Source, man: c.Manifest, opts: opts(c.Tool), check: c})
	}
}

func serverProblems(in []pack.Problem) []Problem {
	out := make([]Problem, 0, len(in))
	for _, p := range in {
		out = append(out, Problem{Tool: p.ID, Path: p.Path, Code: string(p.Code), Message: p.Message})
	}
	return out
}

// DirSource reads the pack in Dir by package pack's one rule
// (pack.Discover, shared with conformance): the tools and guardrail checks
// a Kindgi pack.json lists, else the manifests tool.json, *.tool.json and
// */tool.json. Filesystem codeArtifactRefs resolve relative to the
// declaring file's directory and need dev mode (executor
// Config.WithDevMode). PackID, PackVersion and ArtifactVersion fill
// /v1/info; they default to a Kindgi pack.json's id and version, else
// "sandboxd" and "0.0.0", and to a digest of the tools' ids and module
// digests.
type DirSource struct {
	Dir                                  string
	PackID, PackVersion, ArtifactVersion string
}

func (s DirSource) load() (*packSpec, []Problem) {
	p, problems := pack.Discover(s.Dir)
	if p == nil {
		return nil, serverProblems(problems)
	}
	spec := &packSpec{packID: s.PackID, packVersion: s.PackVersion, artifactVersion: s.ArtifactVersion}
	if spec.packID == "" {
		spec.packID = cmp.Or(p.ID, "sandboxd")
	}
	if spec.packVersion == "" {
		spec.packVersion = cmp.Or(p.Version, "0.0.0")
	}
	spec.addPack(p)
	return spec, serverProblems(problems)
}

// catalog is one loaded generation of tools. Calls hold a reference; a
// retired catalog closes its tools when the last call releases it.
type catalog struct {
	packID, packVersion, artifactVersion string
	requiredEnv                          []string
	hasEnv                               bool
	tools                                map[string]*entry
	order                                []string
	checks                               map[string]*entry // by check id
	checkOrder                           []string

	// state is the reference count, with retiredBit set once the catalog
	// is retired: every call takes and drops references, so they are
	// atomics on the catalog, not a lock shared by all calls.
	state atomic.Int64
}

// retiredBit marks a retired catalog in catalog.state.
const retiredBit = 1 << 62

// entry is one loaded tool.
type entry struct {
	tool    *executor.Tool
	version string      // pinned version callers compare against
	slots   toolSlots   // the per-tool cap (admission.go)
	check   *pack.Check // set for a guardrail check

	spec       []byte // the manifest it was loaded from
	schemaOnce sync.Once
	schema     *manifest.Tool // compiled on first use by validated (core.go)
}

// loadCatalog compiles every tool of src. Any problem fails the whole load
// (and closes what was loaded): a pack service serves its index entirely
// or not at all.
func loadCatalog(ctx context.Context, exec *executor.Executor, src Source, perTool int) (*catalog, []Problem) {
	spec, problems := loadSource(ctx, src)
	if spec == nil {
		return nil, problems
	}
	c := &catalog{packID: spec.packID, packVersion: spec.packVersion, artifactVersion: spec.artifactVersion,
		requiredEnv: spec.requiredEnv, hasEnv: spec.hasEnv, tools: map[string]*entry{}, checks: map[string]*entry{}}
	h := sha256.New()
	for _, ts := range append(spec.tools, spec.checks...) {
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
		m, order, what := c.tools, &c.order, "tool"
		if ts.check != nil {
			m, order, what = c.checks, &c.checkOrder, "check"
		}
		if _, dup := m[t.ID()]; dup {
			problems = append(problems, Problem{Tool: t.ID(), Path: ts.path, Message: "duplicate " + what + " id"})
			_ = t.Close(ctx)
			continue
		}
		m[t.ID()] = &entry{tool: t, version: ts.version, slots: toolSlots{cap: perTool}, spec: ts.man, check: ts.check}
		*order = append(*order, t.ID())
		fmt.Fprintf(h, "%s %s %s\n", what, t.ID(), t.Digest())
	}
	if len(problems) > 0 {
		c.close(ctx)
		return nil, problems
	}
	sort.Strings(c.order)
	sort.Strings(c.checkOrder)
	if c.artifactVersion == "" {
		c.artifactVersion = "sha256-" + hex.EncodeToString(h.Sum(nil))[:16]
	}
	return c, nil
}

func (c *catalog) close(ctx context.Context) {
	for _, e := range c.tools {
		_ = e.tool.Close(ctx)
	}
	for _, e := range c.checks {
		_ = e.tool.Close(ctx)
	}
}

// hold takes another reference on a catalog the caller already holds (or
// on a retired one whose closed tools are to answer; see Server.current).
func (c *catalog) hold() { c.state.Add(1) }

// acquire takes a reference; false when the catalog is retired.
func (c *catalog) acquire() bool {
	for {
		st := c.state.Load()
		if st&retiredBit != 0 {
			return false
		}
		if c.state.CompareAndSwap(st, st+1) {
			return true
		}
	}
}

// release drops a reference; the last one of a retired catalog closes it.
func (c *catalog) release() {
	if c.state.Add(-1) == retiredBit {
		c.close(context.Background())
	}
}

// retire marks c replaced; its tools close once no call holds it.
func (c *catalog) retire() {
	for {
		st := c.state.Load()
		if st&retiredBit != 0 {
			return
		}
		if c.state.CompareAndSwap(st, st|retiredBit) {
			if st == 0 {
				c.close(context.Background())
			}
			return
		}
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
