package executor

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
)

// DeterministicEpoch is the wall clock a deterministic guest starts at:
// 2026-01-01T00:00:00Z, in nanoseconds since the Unix epoch.
const DeterministicEpoch int64 = 1767225600_000_000_000

// deterministicStep is how far a deterministic guest's clocks move at each
// reading, so that loops waiting for time to pass still end.
const deterministicStep int64 = 1_000_000 // 1 ms

// NewDeterministic is New(ctx, cfg.WithDeterministic(seed)).
func NewDeterministic(ctx context.Context, cfg Config, seed uint64) (*Executor, error) {
	return New(ctx, cfg.WithDeterministic(seed))
}

// Deterministic reports whether e runs guests deterministically, and its seed.
func (e *Executor) Deterministic() (seed uint64, ok bool) {
	return e.cfg.seed, e.cfg.deterministic
}

// deterministicModuleConfig replaces the clocks, sleep and random source of
// mc with the deterministic ones when c is deterministic. Each call builds
// fresh state, so every instance starts from the same clocks and stream. The
// stream is metered by sl like any random source (meteredRand).
func (c *Config) deterministicModuleConfig(mc wazero.ModuleConfig, sl *sleeper) wazero.ModuleConfig {
	seed, ok := c.seed, c.deterministic
	if !ok {
		return mc
	}
	var elapsed atomic.Int64 // ns since the instance started
	tick := func() int64 { return elapsed.Add(deterministicStep) }
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "sandboxd deterministic v1")
	return mc.
		WithWalltime(func() (int64, int32) {
			ns := DeterministicEpoch + tick()
			return ns / 1e9, int32(ns % 1e9)
		}, 1).
		WithNanotime(tick, 1).
		WithNanosleep(func(ns int64) {
			if ns > 0 {
				elapsed.Add(ns)
			}
		}).
		WithRandSource(sl.rand(rand.NewChaCha8(key)))
}
