package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
)

// execFlags are the executor settings shared by every command that runs
// tools: the compilation cache, default limits and refused postures.
type execFlags struct {
	cacheDir string
	noCache  bool
	memMB    int64
	cpuMs    int64
	fuel     int64
	refused  stringList
	maxMemMB int64
	maxCPUMs int64
	// allowUnmetered runs modules the fuel pass refuses (else refused).
	allowUnmetered bool
}

// Default operator ceilings on the limits a manifest may declare. 1024 MiB
// is a quarter of what wasm32 can address and 8× the default; 300,000 ms of
// CPU is 2.5× the default wall deadline. Operators raise them explicitly.
const (
	defaultMaxMemMB = 1024
	defaultMaxCPUMs = 300_000
)

// allowUnmeteredUsage is the help of --allow-unmetered (run, serve,
// conformance).
const allowUnmeteredUsage = "run modules the fuel pass cannot meter, interrupted by close-on-context-done (slower; no fuel budget or usage.fuel for them); without it they are refused at load with handler-shape-invalid"

// registerCeilings adds --max-mem-mb and --max-cpu-ms to fs.
func registerCeilings(fs *flag.FlagSet, mem, cpu *int64) {
	fs.Int64Var(mem, "max-mem-mb", defaultMaxMemMB, "ceiling on a manifest's limits.memMB: a tool declaring more is refused at load with policy-refused (0: the wasm32 maximum, 4096)")
	fs.Int64Var(cpu, "max-cpu-ms", defaultMaxCPUMs, "ceiling on a manifest's limits.cpuMs: a tool declaring more is refused at load with policy-refused (0: none)")
}

func (f *execFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacheDir, "cache-dir", "", "compilation cache directory (default: sandboxd/wazero under the user cache dir)")
	fs.BoolVar(&f.noCache, "no-cache", false, "keep compiled code in memory only")
	fs.Int64Var(&f.memMB, "default-mem-mb", executor.DefaultMemMB, "memMB for tools that declare no limits")
	fs.Int64Var(&f.cpuMs, "default-cpu-ms", executor.DefaultCPUMs, "cpuMs for tools that declare no limits")
	fs.Int64Var(&f.fuel, "fuel-budget", 0, "deterministic work budget per call in fuel units (about one per Wasm instruction); a call that spends it fails with limits-exceeded, limit fuel (0: none)")
	registerCeilings(fs, &f.maxMemMB, &f.maxCPUMs)
	fs.BoolVar(&f.allowUnmetered, "allow-unmetered", false, allowUnmeteredUsage)
	fs.Var(&f.refused, "refuse-posture", "refuse tools with this sandbox posture (repeatable: none, context-isolated, strict)")
}

// apply validates the flags and adds them to cfg.
func (f *execFlags) apply(cfg executor.Config) (executor.Config, error) {
	if f.memMB <= 0 || f.cpuMs <= 0 {
		return cfg, errors.New("--default-mem-mb and --default-cpu-ms must be positive")
	}
	if f.fuel < 0 {
		return cfg, errors.New("--fuel-budget must not be negative")
	}
	if err := checkCeilings(f.memMB, f.cpuMs, f.maxMemMB, f.maxCPUMs); err != nil {
		return cfg, err
	}
	var postures []manifest.Posture
	for _, r := range f.refused {
		for _, p := range strings.Split(r, ",") {
			switch manifest.Posture(p) {
			case manifest.PostureNone, manifest.PostureContextIsolated, manifest.PostureStrict:
				postures = append(postures, manifest.Posture(p))
			default:
				return cfg, fmt.Errorf("--refuse-posture: unknown posture %q", p)
			}
		}
	}
	cfg = cfg.WithDefaultLimits(f.memMB, f.cpuMs).WithMaxLimits(f.maxMemMB, f.maxCPUMs).WithRefusedPostures(postures...).WithFuelBudget(f.fuel).WithAllowUnmetered(f.allowUnmetered)
	if f.noCache {
		cfg = cfg.WithCacheDir("")
	} else if f.cacheDir != "" {
		cfg = cfg.WithCacheDir(f.cacheDir)
	}
	return cfg, nil
}

// checkCeilings validates --max-mem-mb/--max-cpu-ms against the defaults.
func checkCeilings(memMB, cpuMs, maxMemMB, maxCPUMs int64) error {
	if maxMemMB < 0 || maxCPUMs < 0 {
		return errors.New("--max-mem-mb and --max-cpu-ms must not be negative")
	}
	if maxMemMB > 0 && memMB > maxMemMB {
		return fmt.Errorf("--default-mem-mb %d is above --max-mem-mb %d", memMB, maxMemMB)
	}
	if maxCPUMs > 0 && cpuMs > maxCPUMs {
		return fmt.Errorf("--default-cpu-ms %d is above --max-cpu-ms %d", cpuMs, maxCPUMs)
	}
	return nil
}
