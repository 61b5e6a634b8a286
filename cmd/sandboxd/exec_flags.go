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
}

func (f *execFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacheDir, "cache-dir", "", "compilation cache directory (default: sandboxd/wazero under the user cache dir)")
	fs.BoolVar(&f.noCache, "no-cache", false, "keep compiled code in memory only")
	fs.Int64Var(&f.memMB, "default-mem-mb", executor.DefaultMemMB, "memMB for tools that declare no limits")
	fs.Int64Var(&f.cpuMs, "default-cpu-ms", executor.DefaultCPUMs, "cpuMs for tools that declare no limits")
	fs.Int64Var(&f.fuel, "fuel-budget", 0, "deterministic work budget per call in fuel units (about one per Wasm instruction); a call that spends it fails with limits-exceeded, limit fuel (0: none)")
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
	cfg = cfg.WithDefaultLimits(f.memMB, f.cpuMs).WithRefusedPostures(postures...).WithFuelBudget(f.fuel)
	if f.noCache {
		cfg = cfg.WithCacheDir("")
	} else if f.cacheDir != "" {
		cfg = cfg.WithCacheDir(f.cacheDir)
	}
	return cfg, nil
}
