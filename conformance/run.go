package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// OCIPrefix marks a pack given as an OCI artifact reference.
const OCIPrefix = "oci://"

// DefaultCaseTimeout is a case's wall deadline when neither the case nor
// the options set one.
const DefaultCaseTimeout = 30 * time.Second

// Options configures a Run. The zero value checks a pack directory with
// its own cases, no OCI access, and compiled code kept in memory.
type Options struct {
	// Cases is the directory of case files (*.cases.json). For a pack
	// directory it defaults to the pack directory and its cases/
	// subdirectory; for an oci:// pack it is required and also holds the
	// tool manifests.
	Cases string
	// Deploy treats the pack as meant for deployment (as pack.json's
	// "deploy": true does; always so for an oci:// pack).
	Deploy bool
	// Deterministic gives guests fixed clocks and a random source seeded
	// with Seed (executor.NewDeterministic).
	Deterministic bool
	Seed          uint64
	// OCI resolves oci refs and inspects oci:// packs; nil refuses them.
	OCI OCI
	// CacheDir is the compilation cache directory; "" keeps it in memory.
	CacheDir string
	// CaseTimeout is the default wall deadline of one case.
	CaseTimeout time.Duration
	// DefaultMemMB and DefaultCPUMs are the limits of tools that declare
	// none (0: executor.DefaultMemMB, executor.DefaultCPUMs).
	DefaultMemMB, DefaultCPUMs int64
	// MaxMemMB and MaxCPUMs are the operator's ceilings on declared limits
	// (executor.Config.WithMaxLimits); 0 means none.
	MaxMemMB, MaxCPUMs int64
	// FuelBudget gives every call a deterministic work budget in fuel units
	// (executor.Config.WithFuelBudget); 0 means none.
	FuelBudget int64
	// AllowUnmetered runs modules the fuel pass refuses, unmetered
	// (executor.Config.WithAllowUnmetered); false refuses them.
	AllowUnmetered bool
}

// OCI is what Run needs from an OCI client; *artifact.OCI implements it.
type OCI interface {
	artifact.Resolver
	Inspect(ctx context.Context, imageRef string) (*artifact.Artifact, error)
}

// InfraError is a failure of the run itself rather than of the pack: bad
// options, an unreadable pack, an unreachable registry. No report is made.
type InfraError struct {
	Msg string
	Err error
}

func (e *InfraError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *InfraError) Unwrap() error { return e.Err }

func infra(err error, format string, args ...any) error {
	return &InfraError{Msg: fmt.Sprintf(format, args...), Err: err}
}

// Run checks the pack at source — a directory, or oci://REF — and returns
// the report. A report with failures is not an error; err is an
// *InfraError when the run itself could not be made.
func Run(ctx context.Context, source string, opts Options) (*Report, error) {
	if opts.CaseTimeout <= 0 {
		opts.CaseTimeout = DefaultCaseTimeout
	}
	r := &runner{opts: opts, rep: &Report{Source: source, Deterministic: opts.Deterministic}}
	if opts.Deterministic {
		r.rep.Seed = opts.Seed
	}
	var caseDirs []string
	if ref, ok := strings.CutPrefix(source, OCIPrefix); ok {
		if opts.OCI == nil {
			return nil, infra(nil, "an oci:// pack needs an OCI client")
		}
		if opts.Cases == "" {
			return nil, infra(nil, "an oci:// pack needs --cases: the directory with its tool manifests and case files")
		}
		art, err := opts.OCI.Inspect(ctx, ref)
		if err != nil {
			if unreachable(err) || ctx.Err() != nil {
				return nil, infra(err, "cannot reach the pack %s", ref)
			}
			te := toolerr.As(err)
			r.rep.add("pack", "artifact", StatusFail, string(te.Code), "%s", te.Message)
			return r.rep, nil
		}
		r.pack = art
		r.deploy = true
		r.dir = opts.Cases
		caseDirs = []string{opts.Cases}
	} else {
		st, err := os.Stat(source)
		if err != nil {
			return nil, infra(err, "cannot read the pack")
		}
		if !st.IsDir() {
			return nil, infra(nil, "the pack %s is not a directory", source)
		}
		pf, err := readPackFile(source)
		if err != nil {
			return nil, infra(err, "cannot read the pack")
		}
		r.deploy = opts.Deploy || pf.Deploy
		r.dir = source
		caseDirs = []string{source, filepath.Join(source, "cases")}
		if opts.Cases != "" {
			caseDirs = []string{opts.Cases}
		}
	}
	if opts.Cases != "" {
		if st, err := os.Stat(opts.Cases); err != nil || !st.IsDir() {
			return nil, infra(err, "--cases %s is not a directory", opts.Cases)
		}
	}
	tools, err := findManifests(r.dir)
	if err != nil {
		return nil, infra(err, "cannot list the pack's manifests")
	}
	if len(tools) == 0 {
		return nil, infra(nil, "no tool manifests (*.tool.json, */tool.json) in %s", r.dir)
	}
	caseFiles, err := findCaseFiles(caseDirs...)
	if err != nil {
		return nil, infra(err, "cannot list the case files")
	}

	cfg := executor.NewConfig().
		WithDevMode(true). // filesystem refs load; the artifact-ref check judges them
		WithCacheDir(opts.CacheDir).
		WithGuestOutput(io.Discard, io.Discard).
		WithLogSink(func(executor.LogRecord) {}).
		WithPoolSize(0).
		WithIdleInstances(0)
	if opts.DefaultMemMB > 0 || opts.DefaultCPUMs > 0 {
		mem, cpu := opts.DefaultMemMB, opts.DefaultCPUMs
		if mem <= 0 {
			mem = executor.DefaultMemMB
		}
		if cpu <= 0 {
			cpu = executor.DefaultCPUMs
		}
		cfg = cfg.WithDefaultLimits(mem, cpu)
	}
	cfg = cfg.WithMaxLimits(opts.MaxMemMB, opts.MaxCPUMs)
	if opts.OCI != nil {
		cfg = cfg.WithResolver(opts.OCI)
	}
	if opts.FuelBudget > 0 {
		cfg = cfg.WithFuelBudget(opts.FuelBudget)
	}
	cfg = cfg.WithAllowUnmetered(opts.AllowUnmetered)
	if opts.Deterministic {
		r.exec, err = executor.NewDeterministic(ctx, cfg, opts.Seed)
	} else {
		r.exec, err = executor.New(ctx, cfg)
	}
	if err != nil {
		return nil, infra(err, "cannot start the executor")
	}
	defer r.exec.Close(context.WithoutCancel(ctx))
	r.wz = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.wz.Close(context.WithoutCancel(ctx))

	// Case files, by tool id.
	type caseEntry struct {
		file string
		cf   *CaseFile
		err  error
	}
	cases := map[string][]caseEntry{}
	var orphans []caseEntry
	for _, f := range caseFiles {
		cf, err := readCaseFile(f)
		e := caseEntry{file: filepath.Base(f), cf: cf, err: err}
		if err != nil {
			orphans = append(orphans, e) // reported under the file name
			continue
		}
		cases[cf.Tool] = append(cases[cf.Tool], e)
	}

	type loaded struct {
		name string
		pt   packTool
	}
	var order []loaded
	ids := map[string]string{} // tool id → manifest file
	for _, pt := range tools {
		name := pt.file
		if pt.err == nil {
			if m, err := manifest.Parse(pt.raw); err == nil {
				name = m.ID
			}
		}
		if first, dup := ids[name]; dup {
			pt.err = fmt.Errorf("duplicate tool id %q: %s declares it too", name, first)
			name = name + " (" + pt.file + ")"
		} else {
			ids[name] = pt.file
		}
		order = append(order, loaded{name, pt})
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].name < order[j].name })
	for _, l := range order {
		if err := ctx.Err(); err != nil {
			return nil, infra(err, "interrupted")
		}
		var tc []*CaseFile
		for _, e := range cases[l.name] {
			tc = append(tc, e.cf)
		}
		if err := r.checkTool(ctx, l.name, l.pt, tc); err != nil {
			return nil, err
		}
		delete(cases, l.name)
	}
	// Case files that do not parse, or name no tool of the pack.
	for _, e := range orphans {
		r.rep.add(e.file, "cases", StatusFail, string(toolerr.MalformedMessage), "%s: %v", e.file, e.err)
	}
	var rest []string
	for id := range cases {
		rest = append(rest, id)
	}
	sort.Strings(rest)
	for _, id := range rest {
		for _, e := range cases[id] {
			r.rep.add(e.file, "cases", StatusFail, string(toolerr.ToolNotInPack), "%s names tool %q, which is not in the pack", e.file, id)
		}
	}
	r.relativize()
	return r.rep, nil
}

// relativize rewrites absolute paths under the pack directory in reasons
// as paths relative to it, so reports read the same on every machine.
func (r *runner) relativize() {
	abs, err := filepath.Abs(r.dir)
	if err != nil {
		return
	}
	for i := range r.rep.Checks {
		c := &r.rep.Checks[i]
		c.Reason = strings.ReplaceAll(c.Reason, abs+string(filepath.Separator), "")
	}
}

type runner struct {
	opts   Options
	rep    *Report
	dir    string
	deploy bool
	pack   *artifact.Artifact // oci:// packs
	exec   *executor.Executor
	wz     wazero.Runtime
}

// unreachable reports whether err comes from the network rather than from
// the registry's answer.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns)
}

// checkTool runs every check of one tool. It returns an error only for an
// infrastructure failure.
func (r *runner) checkTool(ctx context.Context, name string, pt packTool, caseFiles []*CaseFile) error {
	add := func(check string, st Status, code toolerr.Code, format string, args ...any) {
		r.rep.add(name, check, st, string(code), format, args...)
	}
	skipAll := func(reason string, checks ...string) {
		for _, c := range checks {
			add(c, StatusSkip, "", "%s", reason)
		}
	}
	later := []string{"schemas", "network", "limits", "artifact-ref", "artifact", "module", "abi"}
	// manifest
	if pt.err != nil {
		add("manifest", StatusFail, toolerr.InvalidToolDefinition, "%s: %v", pt.file, pt.err)
		skipAll("no usable manifest", later...)
		return nil
	}
	m, err := manifest.Parse(pt.raw)
	if err != nil {
		add("manifest", StatusFail, toolerr.InvalidToolDefinition, "%s: %s", pt.file, issueText(err))
		skipAll("the manifest is invalid", later...)
		return nil
	}
	add("manifest", StatusPass, "", "%s is valid against the Kindgi tool schema 1.1.0", pt.file)

	// schemas
	mt, err := manifest.Load(pt.raw)
	if err != nil {
		add("schemas", StatusFail, toolerr.InvalidToolDefinition, "%s", toolerr.As(err).Message)
	} else {
		add("schemas", StatusPass, "", "input and output schemas compile (draft 2020-12)")
	}
	policyOK := r.checkPolicy(m, add)

	if m.CodeArtifactRef == nil && len(m.Spec) > 0 {
		return r.checkDeclarative(ctx, name, m, mt, policyOK, pt, caseFiles, add)
	}

	// artifact
	mod, ok, err := r.checkArtifact(ctx, m, pt, add)
	if err != nil {
		return err
	}
	if !ok {
		skipAll("no module to check", "module", "abi")
		r.skipBehaviour(name, m, caseFiles, "no module")
		return nil
	}
	// module
	cm, err := r.wz.CompileModule(ctx, mod.Bytes)
	if err != nil {
		add("module", StatusFail, toolerr.HandlerShapeInvalid, "module does not compile: %v", err)
		skipAll("the module does not compile", "abi")
		r.skipBehaviour(name, m, caseFiles, "the module does not compile")
		return nil
	}
	_ = cm.Close(ctx) // validation only: the executor compiles it for real
	add("module", StatusPass, "", "%s (%d bytes) compiles", shortDigest(mod.Digest), len(mod.Bytes))

	// abi (and load)
	if postureErr := postureImports(m, mod.Bytes); postureErr != "" {
		add("abi", StatusFail, toolerr.HandlerShapeInvalid, "%s", postureErr)
		r.skipBehaviour(name, m, caseFiles, "the module does not fit its posture")
		return nil
	}
	if mt == nil || !policyOK {
		add("abi", StatusSkip, "", "the tool cannot load: see the failures above")
		r.skipBehaviour(name, m, caseFiles, "the tool cannot load")
		return nil
	}
	tool, err := r.exec.Load(ctx, pt.raw, executor.WithModule(mod.Bytes), executor.WithBaseDir(pt.dir))
	if err != nil {
		te := toolerr.As(err)
		add("abi", StatusFail, te.Code, "%s", te.Message)
		r.skipBehaviour(name, m, caseFiles, "the tool cannot load")
		return nil
	}
	defer tool.Close(context.WithoutCancel(ctx))
	add("abi", StatusPass, "", "%s handler, imports allowed for posture %s", tool.Style(), m.Posture())

	r.behaviour(ctx, name, mt, tool, mod.Bytes, pt, caseFiles)
	return nil
}

// checkDeclarative checks a declarative HTTP tool (spec.kind http): there
// is no module; loading compiles its spec, and its cases run as for any tool.
func (r *runner) checkDeclarative(ctx context.Context, name string, m *manifest.Manifest, mt *manifest.Tool, policyOK bool, pt packTool, caseFiles []*CaseFile, add func(string, Status, toolerr.Code, string, ...any)) error {
	add("artifact", StatusSkip, "", "declarative HTTP tool: no module")
	add("module", StatusSkip, "", "declarative HTTP tool: no module")
	if mt == nil || !policyOK {
		add("abi", StatusSkip, "", "the tool cannot load: see the failures above")
		r.skipBehaviour(name, m, caseFiles, "the tool cannot load")
		return nil
	}
	tool, err := r.exec.Load(ctx, pt.raw, executor.WithBaseDir(pt.dir))
	if err != nil {
		te := toolerr.As(err)
		add("abi", StatusFail, te.Code, "%s", te.Message)
		r.skipBehaviour(name, m, caseFiles, "the tool cannot load")
		return nil
	}
	defer tool.Close(context.WithoutCancel(ctx))
	add("abi", StatusPass, "", "declarative HTTP tool: its spec compiles")
	r.behaviour(ctx, name, mt, tool, nil, pt, caseFiles)
	return nil
}

// checkPolicy runs the network, limits and artifact-ref checks and reports
// whether all passed.
func (r *runner) checkPolicy(m *manifest.Manifest, add func(string, Status, toolerr.Code, string, ...any)) bool {
	ok := true
	strict := m.Posture() == manifest.PostureStrict
	// network
	kind, hosts := "none", []string(nil)
	if m.Network != nil {
		kind, hosts = m.Network.Kind, m.Network.Hosts
	}
	if _, err := egress.ParsePolicy(kind, hosts); err != nil {
		add("network", StatusFail, toolerr.InvalidToolDefinition, "%v", err)
		ok = false
	} else if strict && kind == "unrestricted" {
		add("network", StatusFail, toolerr.PolicyRefused, "a strict tool cannot have network kind \"unrestricted\"")
		ok = false
	} else if kind == "allowlist" {
		add("network", StatusPass, "", "allowlist of %d valid entries", len(hosts))
	} else {
		add("network", StatusPass, "", "network %s", kind)
	}
	// limits
	switch {
	case m.Limits == nil && strict:
		add("limits", StatusFail, toolerr.PolicyRefused, "a strict tool must declare limits (memMB, cpuMs); operator defaults would decide its budget")
		ok = false
	case m.Limits == nil:
		add("limits", StatusPass, "", "no limits declared: operator defaults apply")
	case m.Limits.MemMB > 4096:
		add("limits", StatusFail, toolerr.LevelNotSupported, "limits.memMB %d is over the wasm32 maximum of 4096", m.Limits.MemMB)
		ok = false
	default:
		add("limits", StatusPass, "", "memMB %d, cpuMs %d", m.Limits.MemMB, m.Limits.CPUMs)
	}
	// artifact-ref
	ref := m.CodeArtifactRef
	switch {
	case ref == nil && len(m.Spec) > 0:
		add("artifact-ref", StatusPass, "", "declarative HTTP tool: no module")
	case ref == nil:
		add("artifact-ref", StatusFail, toolerr.InvalidToolDefinition, "the tool has no handler: codeArtifactRef is required")
		ok = false
	case ref.Kind == artifact.KindFilesystem && r.deploy:
		add("artifact-ref", StatusFail, toolerr.ArtifactRefused, "filesystem ref %q in a pack meant for deploy; publish the module to an OCI registry", ref.ModulePath)
		ok = false
	case ref.Kind == artifact.KindFilesystem:
		add("artifact-ref", StatusPass, "", "filesystem ref (dev mode; a deploy pack would refuse it)")
	case strict && !artifact.DigestPinned(ref.ImageRef) && r.pack == nil:
		add("artifact-ref", StatusFail, toolerr.ArtifactRefused, "a strict tool's imageRef must be pinned by digest (…@sha256:…), got %q", ref.ImageRef)
		ok = false
	default:
		add("artifact-ref", StatusPass, "", "oci ref %s", ref.ImageRef)
	}
	return ok
}

// checkArtifact resolves the module. ok is false when there is none to
// check (the artifact check failed or the tool is declarative).
func (r *runner) checkArtifact(ctx context.Context, m *manifest.Manifest, pt packTool, add func(string, Status, toolerr.Code, string, ...any)) (_ *artifact.Module, ok bool, _ error) {
	ref := m.CodeArtifactRef
	if ref == nil {
		add("artifact", StatusSkip, "", "no codeArtifactRef")
		return nil, false, nil
	}
	aref := artifact.Ref{Kind: ref.Kind, ImageRef: ref.ImageRef, ModulePath: ref.ModulePath, ArtifactVersion: ref.ArtifactVersion}
	var (
		mod *artifact.Module
		err error
	)
	switch {
	case ref.Kind == artifact.KindFilesystem:
		mod, err = artifact.Filesystem{BaseDir: pt.dir}.Resolve(ctx, aref)
	case r.pack != nil:
		// The module under test comes from the pack's artifact; a manifest
		// pinning another digest does not describe it.
		if d := pinnedDigest(ref.ImageRef); d != "" && d != r.pack.Digest {
			add("artifact", StatusFail, toolerr.ArtifactIntegrityFailed, "imageRef pins %s, but the pack is %s", shortDigest(d), shortDigest(r.pack.Digest))
			return nil, false, nil
		}
		aref.ImageRef = r.pack.Ref
		mod, err = r.opts.OCI.Resolve(ctx, aref)
	case r.opts.OCI == nil:
		add("artifact", StatusFail, toolerr.ArtifactUnavailable, "no OCI access configured for %s", ref.ImageRef)
		return nil, false, nil
	default:
		aref.ImageRef = artifact.AnchorLayout(aref.ImageRef, pt.dir)
		mod, err = r.opts.OCI.Resolve(ctx, aref)
	}
	if err != nil {
		if unreachable(err) {
			return nil, false, infra(err, "cannot reach the artifact of %s", m.ID)
		}
		te := toolerr.As(err)
		add("artifact", StatusFail, te.Code, "%s", te.Message)
		return nil, false, nil
	}
	what := "module " + ref.ModulePath
	if ref.Kind == artifact.KindOCI {
		what += ", version " + ref.ArtifactVersion
	}
	add("artifact", StatusPass, "", "%s resolves to %s", what, shortDigest(mod.Digest))
	return mod, true, nil
}

func pinnedDigest(imageRef string) string {
	if i := strings.LastIndex(imageRef, "@sha256:"); i >= 0 {
		return imageRef[i+1:]
	}
	return ""
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// postureImports returns why the module's imports do not fit the tool's
// posture, or "". A strict tool can never read a secret, so importing
// secret_get is a defect, not a latent one.
func postureImports(m *manifest.Manifest, bin []byte) string {
	if m.Posture() != manifest.PostureStrict {
		return ""
	}
	parsed, err := wasmbin.Parse(bin)
	if err != nil {
		return ""
	}
	for _, im := range parsed.Imports {
		if im.Module == abi.ModuleName && im.Name == "secret_get" {
			return "imports " + abi.ModuleName + ".secret_get, which a strict tool may never call (secrets reach it only as injected request headers)"
		}
	}
	return ""
}

func issueText(err error) string {
	te := toolerr.As(err)
	if len(te.Issues) == 0 {
		return te.Message
	}
	parts := make([]string, 0, len(te.Issues))
	for _, is := range te.Issues {
		p := is.InstancePath
		if p == "" {
			p = "/"
		}
		parts = append(parts, p+" "+is.Message)
	}
	return strings.Join(parts, "; ")
}
