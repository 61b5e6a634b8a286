// Package executor loads tools (manifest → artifact → compiled module → ABI
// check) and invokes them under their sandbox posture and limits, mapping
// every failure to a native error code (package toolerr).
//
// An Executor owns the persistent compilation cache and is shared by all the
// tools it loads; each Tool owns its own wazero runtime, so no two tools —
// and never a strict one — share guest state. Executor and Tool are safe for
// concurrent use by many goroutines: any number of Invoke calls may run on
// one Tool at once, each on its own instance.
package executor
