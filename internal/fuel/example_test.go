package fuel_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/internal/fuel"
)

// Example runs a guest under a fixed fuel budget: the same count on every
// machine, and a trap the host can tell from the guest's own once the budget
// is spent.
func Example() {
	ctx := context.Background()
	bin, _ := os.ReadFile("testdata/wat/count.wasm")
	metered, _, err := fuel.Instrument(bin)
	if err != nil {
		panic(err)
	}
	r := wazero.NewRuntime(ctx) // no WithCloseOnContextDone needed
	defer r.Close(ctx)
	if _, err := fuel.HostModule(ctx, r); err != nil {
		panic(err)
	}
	mod, err := r.Instantiate(ctx, metered)
	if err != nil {
		panic(err)
	}
	m, _ := fuel.NewMeter(mod)
	count := mod.ExportedFunction("count")

	m.Set(1_000_000)
	_, err = count.Call(m.Context(ctx), 1000)
	fmt.Println("used:", 1_000_000-m.Remaining(), err)

	m.Set(5000)
	_, err = count.Call(m.Context(ctx), 1000)
	fmt.Println("out of fuel:", err != nil && m.Exhausted())
	// Output:
	// used: 10001 <nil>
	// out of fuel: true
}
