package conformance_test

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/conformance"
)

// Check the sample pack and print its verdict; WriteSummary, WriteJUnit
// and WriteJSON render the whole report.
func ExampleRun() {
	rep, err := conformance.Run(context.Background(), "../examples/pack", conformance.Options{})
	if err != nil {
		fmt.Println("infrastructure error:", err) // exit 2 in the CLI
		return
	}
	t := rep.Totals()
	fmt.Printf("failed: %v, %d checks, %d failures, %d warnings\n", rep.Failed(), t.Checks, t.Failed, t.Warnings)
	// Output:
	// failed: false, 39 checks, 0 failures, 0 warnings
}
