package wasmbin_test

import (
	"context"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
)

func init() {
	wasmbin.SetFuel(
		func(b []byte) ([]byte, error) {
			out, _, err := fuel.Instrument(b)
			return out, err
		},
		func(ctx context.Context, r wazero.Runtime) error {
			_, err := fuel.HostModule(ctx, r)
			return err
		})
}
