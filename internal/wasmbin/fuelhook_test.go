package wasmbin

import (
	"context"

	"github.com/tetratelabs/wazero"
)

// The tests of PassiveData also rewrite the fuel pass's output, but
// internal/fuel imports this package, so a test in it cannot import
// internal/fuel; the external test package (its init) sets these
// to fuel.Instrument and fuel.HostModule.
var (
	fuelInstrumentHook func([]byte) ([]byte, error)
	fuelHostModuleHook func(context.Context, wazero.Runtime) error
)

// SetFuel is for the external test package only.
func SetFuel(instrument func([]byte) ([]byte, error), hostModule func(context.Context, wazero.Runtime) error) {
	fuelInstrumentHook, fuelHostModuleHook = instrument, hostModule
}
