package executor

import (
	"crypto/tls"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/manifest"
)

// Config holds an Executor's long-lived settings. It is immutable: every With
// method returns a changed copy. The zero value is not usable; start from
// NewConfig, which sets every default.
type Config struct {
	gcHeadroom int64 // WithGCHeadroom

	// Compilation cache (WithCacheDir). cacheDirErr is why NewConfig found
	// no default directory; New reports it unless WithCacheDir chose one.
	cacheDir    string
	cacheDirErr error

	// Limits (WithDefaultLimits, WithMaxLimits, WithDefaultTimeout,
	// WithFuelBudget, WithAllowUnmetered).
	defaultMemMB   int64
	defaultCPUMs   int64
	maxMemMB       int64 // operator ceilings; 0: none
	maxCPUMs       int64
	defaultTimeout time.Duration
	fuelBudget     int64
	recordable     bool // WithRecordable
	allowUnmetered bool

	// Loading (WithResolver, WithDevMode, WithRefusedPostures).
	resolver artifact.Resolver
	dev      bool
	refused  map[manifest.Posture]bool

	// Guest output and observation (WithGuestOutput, WithLogSink,
	// WithCallObserver).
	guestStdout io.Writer
	guestStderr io.Writer
	logSink     func(LogRecord)
	observer    func(CallEvent)

	// Instances (WithIdleInstances, WithPoolSize, WithPoolBudget,
	// WithRecycling, WithInstanceImages).
	idleInstances int
	poolSize      int
	poolBudget    int64
	poolIdle      time.Duration
	recycle       bool
	images        bool

	// Determinism (WithDeterministic).
	deterministic bool
	seed          uint64

	// Egress (the WithEgress* and WithSecret* methods).
	egress egressConfig
}

// Defaults applied by NewConfig.
const (
	DefaultMemMB      = 128
	DefaultCPUMs      = 10_000
	DefaultTimeout    = 120 * time.Second
	DefaultPoolBudget = 512 << 20
	DefaultPoolIdle   = 30 * time.Second

	defaultIdleInstances = 4
	defaultPoolSize      = 8
)

// NewConfig returns the default configuration: the persistent compilation
// cache in DefaultCacheDir, limits DefaultMemMB / DefaultCPUMs for tools that
// declare none, a DefaultTimeout wall deadline for calls whose context has
// none, no OCI resolver, filesystem refs refused (not dev mode), guest
// stdout/stderr and logs to os.Stderr, pools of up to 8 instances within
// DefaultPoolBudget, recycling and instance images on.
func NewConfig() Config {
	dir, err := DefaultCacheDir()
	return Config{
		cacheDir:       dir,
		cacheDirErr:    err,
		defaultMemMB:   DefaultMemMB,
		defaultCPUMs:   DefaultCPUMs,
		defaultTimeout: DefaultTimeout,
		guestStdout:    os.Stderr,
		guestStderr:    os.Stderr,
		idleInstances:  defaultIdleInstances,
		poolSize:       defaultPoolSize,
		poolBudget:     DefaultPoolBudget,
		poolIdle:       DefaultPoolIdle,
		recycle:        true,
		images:         true,
		gcHeadroom:     DefaultGCHeadroom,
	}
}

// WithGCHeadroom sets the heap headroom, in bytes, that New gives the
// process's garbage collector (default DefaultGCHeadroom; 0 leaves the
// collector as it is): after each collection the GC percentage is set so
// that about that much garbage piles up before the next one, however
// small the live heap (raiseGCHeadroom says why). It costs up to that much
// resident garbage, and is left out when GOGC or GOMEMLIMIT is set or a
// memory limit was set with debug.SetMemoryLimit, and stops when anything
// else changes the GC percentage. One per process: the largest any Config
// asked for.
func (c Config) WithGCHeadroom(n int64) Config {
	c.gcHeadroom = max(n, 0)
	return c
}

// DefaultCacheDir is the compilation cache used when none is configured:
// sandboxd/wazero under the user cache directory.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "sandboxd", "wazero"), nil
}

// WithCacheDir sets the persistent compilation cache directory. The empty
// string keeps compiled code in memory only. The directory is created mode
// 0700; an existing one writable by other users is refused by New.
func (c Config) WithCacheDir(dir string) Config {
	c.cacheDir, c.cacheDirErr = dir, nil
	return c
}

// WithDefaultLimits sets the limits for tools whose manifest has none.
func (c Config) WithDefaultLimits(memMB, cpuMs int64) Config {
	c.defaultMemMB, c.defaultCPUMs = memMB, cpuMs
	return c
}

// WithMaxLimits sets the operator's ceilings on the limits a tool may
// declare: Load refuses a manifest whose limits.memMB or limits.cpuMs is
// above them with policy-refused (the operator's policy refuses the tool;
// nothing ran, so it is not limits-exceeded), and New refuses default
// limits above them. 0 means no ceiling (memMB is still capped at the wasm32
// maximum, 4096).
func (c Config) WithMaxLimits(memMB, cpuMs int64) Config {
	c.maxMemMB, c.maxCPUMs = memMB, cpuMs
	return c
}

// WithDefaultTimeout sets the wall deadline for calls whose context has none.
func (c Config) WithDefaultTimeout(d time.Duration) Config {
	c.defaultTimeout = d
	return c
}

// WithFuelBudget gives every call a deterministic budget of n fuel units
// (about one per Wasm instruction; see internal/fuel): a call that spends it
// fails with limits-exceeded, details.limit "fuel" — the same outcome on
// every machine, unlike cpuMs. 0 (the default) means no fuel budget. Every
// call reports the fuel it used in Usage.Fuel either way.
func (c Config) WithFuelBudget(n int64) Config {
	c.fuelBudget = max(n, 0)
	return c
}

// WithAllowUnmetered makes Load accept a module the fuel pass refuses and
// run it unmetered: wazero's close-on-context-done stops it at the CPU
// budget, the deadline and cancellation (at every loop header, 13–25× slower
// on tight loops), the fuel budget does not apply to it and its Usage.Fuel
// is 0. The default (false) refuses such a module with handler-shape-invalid.
func (c Config) WithAllowUnmetered(allow bool) Config {
	c.allowUnmetered = allow
	return c
}

// WithResolver sets the resolver for non-filesystem artifact refs (OCI).
func (c Config) WithResolver(r artifact.Resolver) Config {
	c.resolver = r
	return c
}

// WithDevMode allows filesystem artifact refs (the local-development shape,
// which production refuses). `sandboxd run` is dev mode.
func (c Config) WithDevMode(dev bool) Config {
	c.dev = dev
	return c
}

// WithRefusedPostures makes Load refuse tools declaring any of ps with
// level-not-supported.
func (c Config) WithRefusedPostures(ps ...manifest.Posture) Config {
	m := make(map[manifest.Posture]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	c.refused = m
	return c
}

// WithGuestOutput sets where guests' stdout and stderr go (a command's stdout
// is its output and never goes here). Writes are whole lines. nil discards.
func (c Config) WithGuestOutput(stdout, stderr io.Writer) Config {
	c.guestStdout, c.guestStderr = stdout, stderr
	return c
}

// WithLogSink sets the receiver of guest log lines. nil writes them to the
// guest stderr writer.
func (c Config) WithLogSink(sink func(LogRecord)) Config {
	c.logSink = sink
	return c
}

// WithCallObserver sets a function called synchronously for every lifecycle
// event of every call. It must be fast and must not block; nil disables.
func (c Config) WithCallObserver(fn func(CallEvent)) Config {
	c.observer = fn
	return c
}

// LogRecord is one guest log line.
type LogRecord struct {
	ToolID string
	Level  int32
	Msg    string
}

// WithIdleInstances sets how many warm instances a `none`-posture tool keeps
// for reuse.
func (c Config) WithIdleInstances(n int) Config {
	c.idleInstances = n
	return c
}

// WithPoolSize sets the most pre-warmed instances each context-isolated or
// strict reactor tool keeps ready (0 disables pooling); pools grow toward it
// under load and shrink when idle. Tools that declare needsSpec.env are not
// pooled: their WASI environment comes with each call.
func (c Config) WithPoolSize(n int) Config {
	c.poolSize = max(n, 0)
	return c
}

// WithPoolBudget caps the linear memory held by all idle pre-warmed instances
// of all tools together, in bytes (default DefaultPoolBudget), and sets after
// how long without a take a pool shrinks by one instance (default
// DefaultPoolIdle).
func (c Config) WithPoolBudget(bytes int64, idle time.Duration) Config {
	c.poolBudget, c.poolIdle = bytes, idle
	return c
}

// poolLimits returns the pool budget and idle period, a value WithPoolBudget
// set to 0 or less meaning the default.
func (c *Config) poolLimits() (budget int64, idle time.Duration) {
	budget, idle = c.poolBudget, c.poolIdle
	if budget <= 0 {
		budget = DefaultPoolBudget
	}
	if idle <= 0 {
		idle = DefaultPoolIdle
	}
	return budget, idle
}

// WithRecordable makes every reactor instance keep the host answers its
// initialisation drew (or, loaded from an image or reset to one, the
// image's), so that a recorded call (Request.Record) of a context-isolated
// or strict tool runs on a pooled, recycled or image-loaded instance like
// any call, instead of on a fresh one made for it (docs/replay.md). Off
// (the default) costs nothing. Ignored by deterministic executors.
func (c Config) WithRecordable(on bool) Config {
	c.recordable = on
	return c
}

// WithRecycling turns instance recycling for context-isolated tools on (the
// default) or off. Off, every context-isolated call uses a never-used
// instance, as strict calls do.
func (c Config) WithRecycling(on bool) Config {
	c.recycle = on
	return c
}

// WithInstanceImages turns instance images for context-isolated and strict
// tools on (the default) or off. Off, every instance runs its own
// _initialize, so none shares the values its guest drew then with another.
func (c Config) WithInstanceImages(on bool) Config {
	c.images = on
	return c
}

// WithDeterministic makes guests see fixed clocks and a seeded random
// source, so that the same call gives the same answer on every machine and
// every run:
//
//   - the wall clock starts at DeterministicEpoch and the monotonic clock at
//     0 in every new instance, and both advance by exactly 1 ms per reading;
//   - a sleep returns at once and advances both clocks by its duration;
//   - random_get (and everything built on it, such as Go's crypto/rand and
//     map iteration order) reads a ChaCha8 stream seeded with seed, restarted
//     for every instance.
//
// Everything else (limits, postures, egress) is unchanged. It is meant for
// conformance testing, never for production: guests relying on randomness
// for secrecy get none.
func (c Config) WithDeterministic(seed uint64) Config {
	c.deterministic, c.seed = true, seed
	return c
}

// egressConfig is the operator's egress settings (see the WithEgress*
// options).
type egressConfig struct {
	allowRanges  []netip.Prefix
	resolver     egress.Resolver
	dial         egress.DialFunc
	tls          *tls.Config
	limits       egress.Limits
	secrets      SecretSource
	secretDests  egress.SecretDestinations
	secretScopes SecretScopes
}

// WithEgressAllowCIDRs sets operator allow-ranges: addresses inside them may
// be reached by the HTTP import although their class (loopback, private,
// link-local, …) is denied by default. The tool's network policy must still
// admit the destination's host. `--egress-allow-cidr`.
func (c Config) WithEgressAllowCIDRs(ranges ...netip.Prefix) Config {
	c.egress.allowRanges = append([]netip.Prefix(nil), ranges...)
	return c
}

// WithEgressResolver sets the resolver the HTTP import uses (default: the
// system resolver). Tests inject a fake.
func (c Config) WithEgressResolver(r egress.Resolver) Config {
	c.egress.resolver = r
	return c
}

// WithEgressDialer sets how the HTTP import connects to an address that
// passed the policy (default: a TCP dialer). Tests inject a recorder.
func (c Config) WithEgressDialer(d egress.DialFunc) Config {
	c.egress.dial = d
	return c
}

// WithEgressTLS sets the TLS client configuration for https requests
// (default: the system roots). It is cloned per invocation.
func (c Config) WithEgressTLS(tc *tls.Config) Config {
	c.egress.tls = tc
	return c
}

// WithEgressLimits sets the per-invocation egress budgets; zero fields keep
// egress.DefaultLimits.
func (c Config) WithEgressLimits(l egress.Limits) Config {
	c.egress.limits = l
	return c
}

// WithSecrets sets the operator's secret source, consulted for a declared
// secret the call context does not carry (`run` and `serve` without a
// Kindgi caller). Only names a manifest declares in needsSpec.secrets are
// ever looked up.
func (c Config) WithSecrets(src SecretSource) Config {
	c.egress.secrets = src
	return c
}

// WithSecretDestinations binds secrets to the destinations they may be sent
// to (`--secret-destination NAME=origin`, parsed by
// egress.ParseSecretDestinations): a bound secret is substituted into a
// request header only when the request's origin matches one of its entries
// (and the tool's allowlist admits it); anywhere else the request is refused
// with an egress "denied" error naming the secret, never its value. Secrets
// not bound go to any destination of the tool's allowlist (for a declarative
// HTTP tool without network, its urlTemplate's origin). See docs/egress.md.
func (c Config) WithSecretDestinations(d egress.SecretDestinations) Config {
	c.egress.secretDests = make(egress.SecretDestinations, len(d))
	for k, v := range d {
		c.egress.secretDests[k] = append([]egress.Entry(nil), v...)
	}
	return c
}

// WithSecretScopes limits which tools may read each operator secret
// (`--secret-scope NAME=PATTERN[,PATTERN…]`): a scoped secret from the
// operator's source (WithSecrets) is given only to tools whose id matches
// one of its patterns (path.Match syntax, e.g. "acme.*"); to every other tool
// it does not exist (secret_get answers not-found, a placeholder is
// refused as for a missing secret). A secret without a scope is given to
// any tool that declares it in needsSpec.secrets. Secrets the caller passes
// in the call context are the caller's to give and are not scoped. Patterns
// are checked by ParseSecretScopes.
func (c Config) WithSecretScopes(s SecretScopes) Config {
	c.egress.secretScopes = make(SecretScopes, len(s))
	for k, v := range s {
		c.egress.secretScopes[k] = append([]string(nil), v...)
	}
	return c
}
