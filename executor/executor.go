package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/httpspec"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Executor loads and runs tools. Create one with New and Close it when done;
// tools it loaded must be closed first (or are closed with it).
type Executor struct {
	cfg   Config
	cache wazero.CompilationCache

	mu     sync.Mutex
	tools  map[*Tool]struct{}
	closed bool
	// background counts abandoned compilations still running (Executor.compile);
	// they use the compilation cache's engine, so Close leaves closing the
	// cache to the last of them (closing it under a compilation crashes
	// wazero).
	background  int
	cacheClosed bool

	pooledBytes atomic.Int64 // linear memory of idle pre-warmed instances (pool)
	fuelCache   *fuel.Cache  // metered modules, in the compilation cache's fuel/ or in memory
}

// New validates cfg and opens the compilation cache.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if cfg.defaultMemMB <= 0 || cfg.defaultCPUMs <= 0 {
		return nil, fmt.Errorf("executor: default limits must be positive (memMB %d, cpuMs %d)", cfg.defaultMemMB, cfg.defaultCPUMs)
	}
	if cfg.defaultMemMB > maxMemMB {
		return nil, fmt.Errorf("executor: default memMB %d is over the wasm32 maximum of %d", cfg.defaultMemMB, maxMemMB)
	}
	if cfg.maxMemMB < 0 || cfg.maxCPUMs < 0 {
		return nil, fmt.Errorf("executor: limit ceilings must not be negative (memMB %d, cpuMs %d)", cfg.maxMemMB, cfg.maxCPUMs)
	}
	if cfg.maxMemMB > 0 && cfg.defaultMemMB > cfg.maxMemMB || cfg.maxCPUMs > 0 && cfg.defaultCPUMs > cfg.maxCPUMs {
		return nil, fmt.Errorf("executor: default limits (memMB %d, cpuMs %d) are above the ceilings (memMB %d, cpuMs %d)", cfg.defaultMemMB, cfg.defaultCPUMs, cfg.maxMemMB, cfg.maxCPUMs)
	}
	if cfg.cacheDirErr != nil {
		return nil, fmt.Errorf("executor: no user cache directory (set one explicitly): %w", cfg.cacheDirErr)
	}
	raiseGCHeadroom(cfg.gcHeadroom)
	dir := cfg.cacheDir
	var cache wazero.CompilationCache
	fuelDir := ""
	if dir == "" {
		cache = wazero.NewCompilationCache()
	} else {
		if err := ensurePrivateDir(dir); err != nil {
			return nil, err
		}
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return nil, fmt.Errorf("executor: compilation cache %s: %w", dir, err)
		}
		cache = c
		fuelDir = filepath.Join(dir, "fuel")
	}
	return &Executor{cfg: cfg, cache: cache, tools: map[*Tool]struct{}{}, fuelCache: fuel.NewCache(fuelDir)}, nil
}

// ensurePrivateDir creates dir (and missing parents) mode 0700 and refuses a
// directory that other users could write: it holds code that will run.
func ensurePrivateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("executor: cache directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return fmt.Errorf("executor: cache directory %s: %w", abs, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("executor: cache directory %s: %w", abs, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("executor: cache directory %s is not a directory", abs)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("executor: cache directory %s is writable by other users (mode %v); refusing to run code from it", abs, st.Mode().Perm())
	}
	if err := checkOwner(abs, st); err != nil {
		return err
	}
	return nil
}

// Close closes every tool still open and the compilation cache.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	tools := make([]*Tool, 0, len(e.tools))
	for t := range e.tools {
		tools = append(tools, t)
	}
	e.mu.Unlock()
	var errs []error
	for _, t := range tools {
		errs = append(errs, t.Close(ctx))
	}
	e.mu.Lock()
	closeCache := e.background == 0 && !e.cacheClosed
	e.cacheClosed = e.cacheClosed || closeCache
	e.mu.Unlock()
	if closeCache {
		errs = append(errs, e.cache.Close(ctx))
	}
	return errors.Join(errs...)
}

// backgroundStart registers a compilation that outlives its Load.
func (e *Executor) backgroundStart() {
	e.mu.Lock()
	e.background++
	e.mu.Unlock()
}

// backgroundDone ends one; the last one after Close closes the cache.
func (e *Executor) backgroundDone() {
	e.mu.Lock()
	e.background--
	closeCache := e.background == 0 && e.closed && !e.cacheClosed
	e.cacheClosed = e.cacheClosed || closeCache
	e.mu.Unlock()
	if closeCache {
		_ = e.cache.Close(context.Background())
	}
}

// LoadOption adjusts one Load.
type LoadOption func(*loadOptions)

type loadOptions struct {
	baseDir string
	module  []byte
}

// WithBaseDir anchors relative filesystem modulePaths (normally the directory
// of the manifest file).
func WithBaseDir(dir string) LoadOption { return func(o *loadOptions) { o.baseDir = dir } }

// WithModule supplies the module bytes directly instead of resolving the
// manifest's codeArtifactRef (an embedded example, a test).
func WithModule(wasm []byte) LoadOption { return func(o *loadOptions) { o.module = wasm } }

// Load parses and validates a manifest, resolves its artifact, compiles the
// module and checks its ABI shape. The returned Tool must be closed. Failures
// are *toolerr.Error (invalid-tool-definition, level-not-supported,
// policy-refused, artifact-*, handler-shape-invalid, limits-exceeded).
func (e *Executor) Load(ctx context.Context, manifestJSON []byte, opts ...LoadOption) (*Tool, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	mt, err := manifest.Load(manifestJSON)
	if err != nil {
		return nil, err
	}
	t, err := e.load(ctx, mt, &o)
	if err != nil {
		return nil, toolerr.As(err).WithTool(mt.ID)
	}
	t.manifestDigest = artifact.Digest(manifestJSON) // a recording's (record.go)
	return t, nil
}

func (e *Executor) load(ctx context.Context, mt *manifest.Tool, o *loadOptions) (*Tool, error) {
	posture := mt.Posture()
	if e.cfg.refused[posture] {
		return nil, toolerr.New(toolerr.LevelNotSupported, "sandbox posture %q is refused by this sandboxd", posture)
	}
	switch posture {
	case manifest.PostureNone, manifest.PostureContextIsolated, manifest.PostureStrict:
	default:
		return nil, toolerr.New(toolerr.LevelNotSupported, "unknown sandbox posture %q", posture)
	}
	if posture == manifest.PostureStrict && mt.Network != nil && mt.Network.Kind == "unrestricted" {
		return nil, toolerr.New(toolerr.PolicyRefused, "a strict tool cannot have network kind \"unrestricted\"")
	}
	policy, err := parseNetwork(mt.Manifest) // compiled once, shared by every call's egress
	if err != nil {
		return nil, err
	}
	var spec *httpspec.Spec
	if mt.CodeArtifactRef == nil {
		if len(mt.Spec) == 0 {
			return nil, toolerr.New(toolerr.InvalidToolDefinition, "the tool has no handler: codeArtifactRef is required")
		}
		if spec, err = httpspec.Compile(mt.Manifest, policy); err != nil {
			return nil, err
		}
		policy = spec.Policy
	}
	lim, err := e.effectiveLimits(mt.Manifest)
	if err != nil {
		return nil, err
	}
	needs, err := compileNeeds(mt.Manifest)
	if err != nil {
		return nil, err
	}
	env := &toolEnv{
		id: mt.ID, posture: posture, limits: lim, memLimit: lim.memMB * limits.MiB,
		needs: needs, policy: policy, cfg: &e.cfg, pooled: &e.pooledBytes,
	}
	t := &Tool{toolEnv: env, exec: e, m: mt, secretNames: needs.secrets, source: "spec"}
	var mod *artifact.Module
	if spec != nil {
		if spec.AuthSecret != "" {
			t.secretNames = maps.Clone(needs.secrets)
			t.secretNames[spec.AuthSecret] = true
		}
	} else {
		var path string
		if path, t.entry = manifest.SplitModulePath(mt.CodeArtifactRef.ModulePath); path == "" || strings.HasSuffix(mt.CodeArtifactRef.ModulePath, "#") {
			return nil, toolerr.New(toolerr.InvalidToolDefinition, "codeArtifactRef.modulePath %q: a #NAME suffix needs a path before it and a name after it", mt.CodeArtifactRef.ModulePath)
		}
		if mod, err = e.resolve(ctx, mt.Manifest, path, o); err != nil {
			return nil, err
		}
		t.digest, t.source = mod.Digest, mod.Source
	}
	if t.h, err = e.newHandler(ctx, t, spec, mod); err != nil { // the one place a handler kind is chosen
		return nil, err
	}
	if err := e.register(t); err != nil {
		_ = t.h.close(ctx)
		return nil, err
	}
	return t, nil
}

func (e *Executor) resolve(ctx context.Context, m *manifest.Manifest, modulePath string, o *loadOptions) (*artifact.Module, error) {
	if o.module != nil {
		return &artifact.Module{Bytes: o.module, Digest: artifact.Digest(o.module), Source: "memory"}, nil
	}
	ref := artifact.Ref{
		Kind:            m.CodeArtifactRef.Kind,
		ImageRef:        m.CodeArtifactRef.ImageRef,
		ModulePath:      modulePath,
		ArtifactVersion: m.CodeArtifactRef.ArtifactVersion,
	}
	if ref.Kind == artifact.KindFilesystem {
		if !e.cfg.dev {
			return nil, toolerr.New(toolerr.ArtifactRefused, "filesystem artifact refs are refused outside dev mode (sandboxd serve --dev, executor Config.WithDevMode); publish the module to an OCI registry")
		}
		return artifact.Filesystem{BaseDir: o.baseDir}.Resolve(ctx, ref)
	}
	if ref.Kind == artifact.KindOCI {
		ref.ImageRef = artifact.AnchorLayout(ref.ImageRef, o.baseDir)
	}
	if ref.Kind == artifact.KindOCI && m.Posture() == manifest.PostureStrict && !artifact.DigestPinned(ref.ImageRef) {
		return nil, toolerr.New(toolerr.ArtifactRefused, "a strict tool's imageRef must be pinned by digest (…@sha256:…), got %q", ref.ImageRef)
	}
	if e.cfg.resolver == nil {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "no resolver configured for %q artifact refs", ref.Kind)
	}
	return e.cfg.resolver.Resolve(ctx, ref)
}

// maxMemMB is the largest memMB wasm32 can use (65536 pages of 64 KiB).
const maxMemMB = 4096

type toolLimits struct {
	memMB int64
	cpuMs int64
}

func (e *Executor) effectiveLimits(m *manifest.Manifest) (toolLimits, error) {
	l := toolLimits{memMB: e.cfg.defaultMemMB, cpuMs: e.cfg.defaultCPUMs}
	if m.Limits != nil {
		l = toolLimits{memMB: m.Limits.MemMB, cpuMs: m.Limits.CPUMs}
	}
	if l.memMB > maxMemMB {
		if m.Limits != nil { // the manifest's own mistake: a definition no sandboxd can run
			return l, &toolerr.Error{Code: toolerr.InvalidToolDefinition, Message: fmt.Sprintf("limits.memMB %d is over the wasm32 maximum of %d MB: declare %d or less", l.memMB, maxMemMB, maxMemMB),
				Details: map[string]any{"limit": "memMB", "declared": l.memMB, "max": maxMemMB}}
		}
		return l, toolerr.New(toolerr.LevelNotSupported, "the operator default memMB %d (--default-mem-mb) is over the wasm32 maximum of %d MB", l.memMB, maxMemMB)
	}
	if c := e.cfg.maxMemMB; c > 0 && l.memMB > c {
		return l, &toolerr.Error{Code: toolerr.PolicyRefused, Message: fmt.Sprintf("limits.memMB %d is above this sandboxd's ceiling of %d (--max-mem-mb)", l.memMB, c),
			Details: map[string]any{"limit": "memMB", "declared": l.memMB, "max": c}}
	}
	if c := e.cfg.maxCPUMs; c > 0 && l.cpuMs > c {
		return l, &toolerr.Error{Code: toolerr.PolicyRefused, Message: fmt.Sprintf("limits.cpuMs %d is above this sandboxd's ceiling of %d (--max-cpu-ms)", l.cpuMs, c),
			Details: map[string]any{"limit": "cpuMs", "declared": l.cpuMs, "max": c}}
	}
	return l, nil
}

func (e *Executor) register(t *Tool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return toolerr.New(toolerr.Internal, "executor is closed")
	}
	e.tools[t] = struct{}{}
	return nil
}

func (e *Executor) unregister(t *Tool) {
	e.mu.Lock()
	delete(e.tools, t)
	e.mu.Unlock()
}
