package executor

// Stats is a tool's instance counters, as Tool.Stats reports them. A field
// is zero where the tool's kind keeps none.
type Stats struct {
	// Metered reports whether the guest is interrupted through fuel
	// metering (false: a declarative HTTP tool, or a module the pass
	// refused, which wazero's close-on-context-done stops instead).
	Metered bool
	// PoolReady is how many pre-warmed instances are ready now, and
	// PoolTarget how many the pool currently aims to keep (it adapts to
	// load, up to the pool size). Both are 0 for a tool that is not pooled
	// (posture none, command style, declared env, declarative HTTP, pool
	// size 0).
	PoolReady, PoolTarget int
	// RecycledCalls is how many calls were served by a recycled instance
	// (see Recycling in the package doc).
	RecycledCalls int64
	// ImageInstances is how many instances were loaded from the tool's
	// instance image instead of running _initialize.
	ImageInstances int64
}

// Stats reports t's instance counters.
func (t *Tool) Stats() Stats { return t.h.stats() }

func (t *reactorHandler) stats() Stats {
	s := Stats{Metered: t.metered, ImageInstances: t.cloned.Load()}
	if p := t.pool; p != nil {
		s.PoolReady, s.PoolTarget = len(p.ready), int(p.target.Load())
		s.RecycledCalls = p.recycled.Load()
	}
	return s
}

func (t *commandHandler) stats() Stats { return Stats{Metered: t.metered} }

func (t *httpHandler) stats() Stats { return Stats{} }
