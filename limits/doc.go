// Package limits owns the per-invocation resource caps of docs/DESIGN.md "Limits":
// the memory account that caps a guest's linear memory together with the
// host-side buffers held for it (memMB), the CPU-time clock and watchdog of
// the thread running a guest (cpuMs), and usage accounting.
package limits
