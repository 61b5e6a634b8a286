//go:build !wasip1

package sdk

import "os"

// commandHost is the host Main uses outside Wasm: an empty call context, logs
// on stderr.
func commandHost() host { return newMemHost(nil, os.Stderr) }
