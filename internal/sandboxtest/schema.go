package sandboxtest

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// G01Schema is issue 24's G01 reproducer schema, the validation bomb the
// work-budget and deadline tests run against: an array whose every item is
// checked against allOf of 3 refs to a6, a_k = allOf of 10 refs to
// a_(k-1), a1 integer (about 670,000 subschemas per item, under the
// load-time guard). Each call returns a fresh map the caller may edit.
func G01Schema() map[string]any {
	return map[string]any{"type": "array", "items": G01Heavy(3), "$defs": G01Defs("allOf", 10, map[string]any{"type": "integer"})}
}

// G01Defs is the $defs of the G01 reproducer: a_k applies a_(k-1) fan
// times with comb (allOf, anyOf, oneOf), a1 is leaf. Validating one value
// against a6 evaluates about 2*fan^5 subschemas (222,221 for fan 10), just
// under the load-time guard when applied top times (top <= 4).
func G01Defs(comb string, fan int, leaf any) map[string]any {
	defs := map[string]any{"a1": leaf}
	for k := 2; k <= 6; k++ {
		refs := make([]any, fan)
		for i := range refs {
			refs[i] = map[string]any{"$ref": fmt.Sprintf("#/$defs/a%d", k-1)}
		}
		defs[fmt.Sprintf("a%d", k)] = map[string]any{comb: refs}
	}
	return defs
}

// G01Heavy is the reproducer's per-value schema: allOf of top refs to a6
// (of G01Defs).
func G01Heavy(top int) map[string]any {
	refs := make([]any, top)
	for i := range refs {
		refs[i] = map[string]any{"$ref": "#/$defs/a6"}
	}
	return map[string]any{"allOf": refs}
}

// Array is the JSON array of n copies of item ("[]" for 0).
func Array(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

// Zeros is Array(n, "0"), 2n+1 bytes for n > 0: the input that makes
// G01Schema check n items.
func Zeros(n int) string { return Array(n, "0") }

// Timed runs fn on a locked OS thread and returns its wall time or, when
// the machine is so loaded that the thread ran less than half of it, the
// thread's CPU time: what a bounded validation or call spent stopping is
// its own doing, the time it waited for a CPU is not. Where per-thread CPU
// clocks are not supported it is the wall time.
func Timed(fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := limits.CurrentThread()
	start, cpu0 := time.Now(), clock.Now()
	fn()
	took, cpu := time.Since(start), clock.Now()-cpu0
	if limits.Supported() && cpu < took/2 {
		return cpu
	}
	return took
}
