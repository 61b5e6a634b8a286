package executor

import (
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/manifest"
)

// Config holds an Executor's long-lived settings. It is immutable: every With
// method returns a changed copy. The zero value is not usable; start from
// NewConfig.
type Config struct {
	cacheDir       string
	cacheDirSet    bool
	defaultMemMB   int64
	defaultCPUMs   int64
	defaultTimeout time.Duration
	resolver       artifact.Resolver
	dev            bool
	refused        map[manifest.Posture]bool
	guestStdout    io.Writer
	guestStderr    io.Writer
	logSink        func(LogRecord)
	idleInstances  int
	observer       func(CallEvent)
	poolSize       int
	poolSizeSet    bool
	egress         egressConfig // config_egress.go
	deterministic  bool         // deterministic.go
	poolBudget     int64        // pool.go
	fuelBudget     int64        // fuel.go
	allowUnmetered bool         // fuel.go
	noRecycle      bool         // recycle.go
	noImages       bool         // image.go
	poolIdle       time.Duration
	seed           uint64
	maxMemMB       int64 // operator ceilings (WithMaxLimits); 0: none
	maxCPUMs       int64
}

// Defaults applied by NewConfig.
const (
	DefaultMemMB   = 128
	DefaultCPUMs   = 10_000
	DefaultTimeout = 120 * time.Second
)

// NewConfig returns the default configuration: the persistent compilation
// cache in DefaultCacheDir, limits DefaultMemMB / DefaultCPUMs for tools that
// declare none, a DefaultTimeout wall deadline for calls whose context has
// none, no OCI resolver, filesystem refs refused (not dev mode), guest
// stdout/stderr and logs to os.Stderr.
func NewConfig() Config {
	return Config{
		defaultMemMB:   DefaultMemMB,
		defaultCPUMs:   DefaultCPUMs,
		defaultTimeout: DefaultTimeout,
		guestStdout:    os.Stderr,
		guestStderr:    os.Stderr,
		idleInstances:  4,
	}
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
	c.cacheDir, c.cacheDirSet = dir, true
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

// WithIdleInstances sets how many warm instances a `none`-posture tool keeps
// for reuse.
func (c Config) WithIdleInstances(n int) Config {
	c.idleInstances = n
	return c
}

// LogRecord is one guest log line.
type LogRecord struct {
	ToolID string
	Level  int32
	Msg    string
}
