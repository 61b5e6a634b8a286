package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/deployenv"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/pack"
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
	// Index and ModuleRoot check a Kindgi pack index (the inputs serve
	// takes) instead of a directory; Run's source is then "". Its tools'
	// modulePaths and its guardrails' checkModulePaths resolve under
	// ModuleRoot through BundleMap (nil: none). Case files default to the
	// index's directory and its cases/ subdirectory.
	//
	// Index may be oci://REF, an image carrying the index (see
	// pack.ImageSource): ModuleRoot and BundleMapPath are then paths inside
	// the image ("" for its rules), case files default to the image's
	// (*.cases.json in its pack directory and cases/), and the pack counts
	// as meant for deploy.
	Index, ModuleRoot string
	BundleMap         pack.BundleMap
	// BundleMapPath is the bundle map inside an oci:// index's image.
	BundleMapPath string
	// Envelope is a kindgi-deploy-envelope/v1 file to verify against the
	// index (needs Index) with the keys of TrustedKeys: an "envelope"
	// check. The image digest is asked of OCI for the envelope's imageRef.
	Envelope, TrustedKeys string
	// Cassettes is a directory of recordings (*.rec.jsonl, sandboxd run
	// --record): each is a "cassette" check of the tool it names, replayed
	// offline (cassettes.go).
	Cassettes string
}

// OCI is what Run needs from an OCI client; *artifact.OCI implements it.
type OCI interface {
	artifact.Resolver
	Inspect(ctx context.Context, imageRef string) (*artifact.Artifact, error)
	OpenPackImage(ctx context.Context, imageRef string) (*artifact.PackImage, error)
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
	var lp *loadedPack
	if opts.Cases != "" {
		if st, err := os.Stat(opts.Cases); err != nil || !st.IsDir() {
			return nil, infra(err, "--cases %s is not a directory", opts.Cases)
		}
	}
	if ociIndex := strings.HasPrefix(opts.Index, OCIPrefix); !ociIndex && (opts.Index == "") != (opts.ModuleRoot == "") {
		return nil, infra(nil, "--index and --module-root go together")
	} else if opts.BundleMapPath != "" && !ociIndex {
		return nil, infra(nil, "a bundle map path inside an image goes with an oci:// index")
	}
	if opts.Envelope != "" && opts.Index == "" {
		return nil, infra(nil, "--envelope verifies a pack index: it needs --index")
	}
	if opts.Envelope != "" && opts.TrustedKeys == "" {
		return nil, infra(nil, "--envelope needs --trusted-keys")
	}
	if ref, ok := strings.CutPrefix(source, OCIPrefix); ok {
		if opts.OCI == nil {
			return nil, infra(nil, "an oci:// pack needs an OCI client")
		}
		if opts.Cases == "" {
			return nil, infra(nil, "an oci:// pack needs --cases: the directory with its tool manifests and case files")
		}
		if opts.Index != "" {
			return nil, infra(nil, "an oci:// pack takes its manifests from --cases, not --index")
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
		if lp, err = r.readDir(opts.Cases); lp == nil {
			if err != nil {
				return nil, err
			}
			r.relativize()
			return r.rep, nil
		}
	} else if ref, ok := strings.CutPrefix(opts.Index, OCIPrefix); ok {
		if source != "" {
			return nil, infra(nil, "give the pack either as PACK or as --index, not both")
		}
		if opts.OCI == nil {
			return nil, infra(nil, "an oci:// index needs an OCI client")
		}
		r.rep.Source = opts.Index
		r.deploy = true // an image is what a deploy ships
		img, err := opts.OCI.OpenPackImage(ctx, ref)
		if err != nil {
			if unreachable(err) || ctx.Err() != nil {
				return nil, infra(err, "cannot reach the pack image %s", ref)
			}
			te := toolerr.As(err)
			r.rep.add("pack", "image", StatusFail, string(te.Code), "%s", te.Message)
			return r.rep, nil
		}
		r.image = img
		if opts.Cases != "" {
			caseDirs = []string{opts.Cases}
		}
		p, problems := pack.ImageSource{Image: img, Ref: ref, Pinned: artifact.DigestPinned(ref), ModuleRoot: opts.ModuleRoot, BundleMap: opts.BundleMapPath}.Read()
		if p == nil {
			for _, pr := range problems {
				r.rep.add("pack", "index", StatusFail, string(cmpCode(pr.Code)), "%s", pr.Message)
			}
			return r.rep, nil
		}
		r.rep.add("pack", "image", StatusPass, "", "%s: %s layout, %d file(s) under /%s", img.Artifact.Ref, img.Layout, len(img.Files()), strings.TrimPrefix(img.Root, "."))
		lp = fromPack(p, problems, string(filepath.Separator))
		lp.index, _ = fs.ReadFile(img.FS(), pack.IndexIn(img))
		r.validateIndex(lp.index, p)
	} else if opts.Index != "" {
		if source != "" {
			return nil, infra(nil, "give the pack either as PACK or as --index/--module-root, not both")
		}
		if st, err := os.Stat(opts.Index); err != nil || !st.Mode().IsRegular() {
			return nil, infra(err, "cannot read the pack index %s", opts.Index)
		}
		if st, err := os.Stat(opts.ModuleRoot); err != nil || !st.IsDir() {
			return nil, infra(err, "the module root %s is not a directory", opts.ModuleRoot)
		}
		r.rep.Source = opts.Index
		r.dir = filepath.Dir(opts.Index)
		r.deploy = opts.Deploy
		caseDirs = []string{r.dir, filepath.Join(r.dir, "cases")}
		if opts.Cases != "" {
			caseDirs = []string{opts.Cases}
		}
		p, problems := pack.IndexSource{Index: opts.Index, ModuleRoot: opts.ModuleRoot, BundleMap: opts.BundleMap}.Read()
		if p == nil {
			for _, pr := range problems {
				r.rep.add("pack", "index", StatusFail, string(toolerr.InvalidToolDefinition), "%s", pr.Message)
			}
			r.relativize()
			return r.rep, nil
		}
		lp = fromPack(p, problems, r.dir)
		lp.index, _ = os.ReadFile(opts.Index)
		r.validateIndex(lp.index, p)
	} else {
		st, err := os.Stat(source)
		if err != nil {
			return nil, infra(err, "cannot read the pack")
		}
		if !st.IsDir() {
			return nil, infra(nil, "the pack %s is not a directory", source)
		}
		r.dir = source
		caseDirs = []string{source, filepath.Join(source, "cases")}
		if opts.Cases != "" {
			caseDirs = []string{opts.Cases}
		}
		if lp, err = r.readDir(source); lp == nil {
			if err != nil {
				return nil, err
			}
			r.relativize()
			return r.rep, nil
		}
		r.deploy = opts.Deploy || lp.deploy
	}
	if lp.layout == pack.LayoutKindgiPack {
		r.rep.add("pack", "pack.json", StatusPass, "", "valid against Kindgi's pack.schema.json 1.1.0: %d tool(s), %d guardrail check(s) of pack code", len(lp.tools), len(lp.checks))
	}
	if len(lp.builtin) > 0 {
		r.rep.add("pack", "guardrails", StatusPass, "", "not pack code (a runtime built-in check), not run here: %s", strings.Join(lp.builtin, ", "))
	}
	if opts.Envelope != "" {
		if err := r.checkEnvelope(ctx, lp.index); err != nil {
			return nil, err
		}
	}
	tools := lp.tools
	caseFiles, err := findCaseFiles(caseDirs...)
	if err != nil {
		return nil, infra(err, "cannot list the case files")
	}
	if opts.Cassettes != "" {
		if r.cassettes, r.badCassettes, err = readCassettes(opts.Cassettes); err != nil {
			return nil, infra(err, "cannot read the cassettes")
		}
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
	add := func(e caseEntry) {
		if e.err != nil {
			orphans = append(orphans, e) // reported under the file name
			return
		}
		cases[caseKey(e.cf)] = append(cases[caseKey(e.cf)], e)
	}
	for _, f := range caseFiles {
		cf, err := readCaseFile(f)
		add(caseEntry{file: filepath.Base(f), cf: cf, err: err})
	}
	if r.image != nil && opts.Cases == "" {
		for _, name := range imageCaseFiles(r.image) {
			b, err := fs.ReadFile(r.image.FS(), name)
			var cf *CaseFile
			if err == nil {
				cf, err = ParseCaseFile(b)
			}
			add(caseEntry{file: path.Base(name), cf: cf, err: err})
		}
	}

	type loaded struct {
		name string
		pt   packTool
	}
	var order, checks []loaded
	ids := map[string]string{} // tool id → manifest file
	for _, pt := range lp.checks {
		checks = append(checks, loaded{pt.check.ID, pt})
	}
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
	for _, l := range append(order, checks...) { // checks are sorted by id already
		if err := ctx.Err(); err != nil {
			return nil, infra(err, "interrupted")
		}
		key := "tool:" + l.name
		if l.pt.check != nil {
			key = "check:" + l.name
		}
		var tc []*CaseFile
		for _, e := range cases[key] {
			tc = append(tc, e.cf)
		}
		if err := r.checkTool(ctx, l.name, l.pt, tc); err != nil {
			return nil, err
		}
		delete(cases, key)
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
	for _, key := range rest {
		for _, e := range cases[key] {
			if e.cf.Check != "" {
				r.rep.add(e.file, "cases", StatusFail, "check-not-in-pack", "%s names check %q, which is not in the pack", e.file, e.cf.Check)
				continue
			}
			r.rep.add(e.file, "cases", StatusFail, string(toolerr.ToolNotInPack), "%s names tool %q, which is not in the pack", e.file, e.cf.Tool)
		}
	}
	r.orphanCassettes()
	r.relativize()
	return r.rep, nil
}

// validateIndex is the "pack index" check: a pack service reads the index
// leniently; an indexer must emit what the schema says.
func (r *runner) validateIndex(index []byte, p *pack.Pack) {
	switch lines, err := pack.ValidateIndex(index); {
	case err != nil:
		r.rep.add("pack", "index", StatusFail, string(toolerr.InvalidToolDefinition), "%v", err)
	case lines != nil:
		r.rep.add("pack", "index", StatusFail, string(toolerr.InvalidToolDefinition), "not valid against pack-index.schema.json 1.4.0: %s", strings.Join(lines, "; "))
	default:
		r.rep.add("pack", "index", StatusPass, "", "valid against pack-index.schema.json 1.4.0: %d tool(s), %d guardrail check(s)", len(p.Tools), len(p.Checks))
	}
}

func cmpCode(c toolerr.Code) toolerr.Code {
	if c == "" {
		return toolerr.InvalidToolDefinition
	}
	return c
}

// checkEnvelope verifies the deploy envelope against the index and the
// trusted keys: the pack's "envelope" check. Unreadable files are
// infrastructure errors.
func (r *runner) checkEnvelope(ctx context.Context, index []byte) error {
	env, err := deployenv.ReadFile(r.opts.Envelope)
	if err != nil {
		var de *deployenv.Error
		if errors.As(err, &de) && de.Code == deployenv.BadInput {
			r.rep.add("pack", "envelope", StatusFail, string(de.Code), "%s", de.Message)
			return nil
		}
		return infra(err, "cannot read the envelope")
	}
	keys, err := deployenv.ReadTrustedKeys(r.opts.TrustedKeys)
	if err != nil {
		return infra(err, "cannot read --trusted-keys")
	}
	var digest func(context.Context, string) (string, error)
	if img := r.image; img != nil {
		// The index came from an image: that image is what is checked.
		ref := strings.TrimPrefix(r.opts.Index, OCIPrefix)
		digest = func(_ context.Context, imageRef string) (string, error) {
			if !artifact.SameRepository(imageRef, ref) {
				return "", fmt.Errorf("the envelope's imageRef %s is not the repository checked (%s)", imageRef, ref)
			}
			return img.Artifact.Digest, nil
		}
	} else if r.opts.OCI != nil {
		digest = func(ctx context.Context, ref string) (string, error) {
			art, err := r.opts.OCI.Inspect(ctx, ref)
			if err != nil {
				return "", err
			}
			return art.Digest, nil
		}
	}
	if err := deployenv.Verify(ctx, env, deployenv.Options{Trusted: keys, Index: index, ImageDigest: digest}); err != nil {
		var de *deployenv.Error
		if errors.As(err, &de) {
			r.rep.add("pack", "envelope", StatusFail, string(de.Code), "%s", de.Message)
			return nil
		}
		return infra(err, "cannot verify the envelope")
	}
	r.rep.add("pack", "envelope", StatusPass, "", "signed by trusted key %q; image %s; index sha256 and artifactVersion %s match", env.SignerKeyID, shortDigest(env.ImageDigest), env.ArtifactVersion)
	return nil
}

// imageCaseFiles lists the case files a pack image carries: *.cases.json
// in its pack directory and in cases/ below it.
func imageCaseFiles(img *artifact.PackImage) []string {
	var out []string
	for _, name := range img.Files() {
		dir := path.Dir(name)
		if strings.HasSuffix(name, ".cases.json") && (dir == img.Root || dir == path.Join(img.Root, "cases")) {
			out = append(out, name)
		}
	}
	return out
}

func caseKey(cf *CaseFile) string {
	if cf.Check != "" {
		return "check:" + cf.Check
	}
	return "tool:" + cf.Tool
}

// readDir reads a pack directory by package pack's rule (Discover). A
// directory that cannot be read, or has no tools, is an infrastructure
// error; a pack.json that breaks its schema is a failed "pack.json" check
// (lp nil, err nil): the report then has nothing else.
func (r *runner) readDir(dir string) (*loadedPack, error) {
	p, problems := pack.Discover(dir)
	if p == nil {
		pf := filepath.Join(dir, "pack.json")
		if _, err := os.Stat(pf); err != nil {
			return nil, infra(nil, "cannot read the pack: %s", problems[0].Message)
		}
		for _, pr := range problems {
			r.rep.add("pack", "pack.json", StatusFail, string(toolerr.InvalidToolDefinition), "%s", pr.Message)
		}
		return nil, nil
	}
	if len(p.Tools) == 0 && len(p.Checks) == 0 && len(p.Builtin) == 0 && p.Layout == pack.LayoutManifests {
		return nil, infra(nil, "no tool manifests (tool.json, *.tool.json, */tool.json) and no Kindgi pack.json in %s", dir)
	}
	return fromPack(p, problems, dir), nil
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
	pack   *artifact.Artifact  // oci:// packs
	image  *artifact.PackImage // an --index oci:// pack's image
	exec   *executor.Executor
	wz     wazero.Runtime

	cassettes    map[string][]*cassette // by tool id, until the tool's checks took them
	badCassettes []*cassette
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
		code, check := pt.code, "manifest"
		if code == "" {
			code = toolerr.InvalidToolDefinition
		}
		if code == toolerr.ArtifactUnavailable { // the index names a module the module root lacks
			check = "artifact"
			skipAll("no module", "manifest")
			add(check, StatusFail, code, "%v", pt.err)
			skipAll("no module", "module", "abi")
			return nil
		}
		add(check, StatusFail, code, "%s: %v", pt.file, pt.err)
		skipAll("no usable manifest", later...)
		return nil
	}
	m, err := manifest.Parse(pt.raw)
	if err != nil {
		add("manifest", StatusFail, toolerr.InvalidToolDefinition, "%s: %s", pt.file, issueText(err))
		skipAll("the manifest is invalid", later...)
		return nil
	}
	if c := pt.check; c != nil {
		add("manifest", StatusPass, "", "guardrail %s (%s, %s): its check is a tool taking {config, trace} and returning a CheckResult", c.Guardrail, c.Kind, pt.file)
	} else {
		add("manifest", StatusPass, "", "%s is valid against the Kindgi tool schema 1.1.0", pt.file)
		if why := MCPRefusal(m.ID, m.Input); why != "" {
			add("mcp", StatusWarn, "", "%s: sandboxd mcp refuses to boot with this tool (serve and conformance accept it)", why)
		}
	}

	// schemas
	mt, err := manifest.Load(pt.raw)
	if err != nil {
		add("schemas", StatusFail, toolerr.InvalidToolDefinition, "%s", toolerr.As(err).Message)
	} else {
		add("schemas", StatusPass, "", "input and output schemas compile (draft 2020-12)")
	}
	if c := pt.check; c != nil {
		r.checkConfig(c, add)
	}
	policyOK := r.checkPolicy(m, pt, add)

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
	cm, err := executor.CompileChecked(ctx, r.wz, mod.Bytes)
	if err != nil {
		msg := err.Error()
		if te := (*toolerr.Error)(nil); errors.As(err, &te) {
			msg = te.Message // the guard's refusal, without its code
		}
		add("module", StatusFail, toolerr.HandlerShapeInvalid, "module does not compile: %s", msg)
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
	add("abi", StatusPass, "", "%s handler (%s), imports allowed for posture %s", tool.Style(), moduleABI(mod.Bytes), m.Posture())

	r.behaviour(ctx, name, mt, tool, mod.Bytes, pt, caseFiles)
	r.replayCassettes(ctx, tool, add)
	return nil
}

// checkConfig is a guardrail check's static "config" check: the config
// the guardrail declares is valid against its configSchema, as a Kindgi
// runtime requires when it registers the guardrail.
func (r *runner) checkConfig(c *pack.Check, add func(string, Status, toolerr.Code, string, ...any)) {
	switch {
	case c.ConfigSchema == nil && c.Config == nil:
		add("config", StatusPass, "", "no configSchema, no config")
	case c.ConfigSchema == nil:
		add("config", StatusPass, "", "no configSchema: any config object is sent as is")
	case c.Config == nil:
		add("config", StatusPass, "", "configSchema compiles; the guardrail declares no config")
	default:
		if err := c.ValidateConfig(); err != nil {
			add("config", StatusFail, toolerr.InputValidationFailed, "the declared config: %s", toolerr.As(err).Message)
			return
		}
		add("config", StatusPass, "", "the declared config is valid against configSchema")
	}
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
	r.replayCassettes(ctx, tool, add)
	return nil
}

// checkPolicy runs the network, limits and artifact-ref checks and reports
// whether all passed.
func (r *runner) checkPolicy(m *manifest.Manifest, pt packTool, add func(string, Status, toolerr.Code, string, ...any)) bool {
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
		add("limits", StatusFail, toolerr.InvalidToolDefinition, "limits.memMB %d is over the wasm32 maximum of 4096 MB: declare 4096 or less", m.Limits.MemMB)
		ok = false
	default:
		add("limits", StatusPass, "", "memMB %d, cpuMs %d", m.Limits.MemMB, m.Limits.CPUMs)
	}
	// artifact-ref
	ref := m.CodeArtifactRef
	switch {
	case pt.module != nil:
		add("artifact-ref", StatusPass, "", "the index names module %s under the module root", pt.modulePath)
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
	if pt.module != nil {
		mod := &artifact.Module{Bytes: pt.module, Digest: artifact.Digest(pt.module), Source: pt.modulePath}
		add("artifact", StatusPass, "", "module %s is %s under the module root, %s", pt.modulePath, pt.moduleFile, shortDigest(mod.Digest))
		return mod, true, nil
	}
	ref := m.CodeArtifactRef
	if ref == nil {
		add("artifact", StatusSkip, "", "no codeArtifactRef")
		return nil, false, nil
	}
	modulePath, _ := manifest.SplitModulePath(ref.ModulePath) // a #NAME suffix names an export, not a file
	aref := artifact.Ref{Kind: ref.Kind, ImageRef: ref.ImageRef, ModulePath: modulePath, ArtifactVersion: ref.ArtifactVersion}
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

// moduleABI names the ABI the executor runs the module with: a module
// importing anything from extism:host/env is an Extism plug-in
// (docs/extism.md), any other one an ABI v1 handler.
func moduleABI(bin []byte) string {
	if parsed, err := wasmbin.Parse(bin); err == nil {
		for _, im := range parsed.Imports {
			if im.Module == abi.ExtismModuleName {
				return "Extism"
			}
		}
	}
	return "ABI v1"
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
