package conformance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestJudgeOutputSchemaBoundedByWork: a case's expect.outputSchema was
// checked on the default work budget with no deadline (17 s of CPU for
// 100 items of the G01 schema); judge now stops at its Work's deadline
// and at its limit, failing the case with what stopped it.
func TestJudgeOutputSchemaBoundedByWork(t *testing.T) {
	schema, _ := json.Marshal(sandboxtest.G01Schema())
	cf, err := ParseCaseFile([]byte(`{"tool":"a","cases":[{"name":"x","input":{},"expect":{"outputSchema":` + string(schema) + `}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out := outcome{output: json.RawMessage(sandboxtest.Zeros(100))}
	const d = 300 * time.Millisecond
	start := time.Now()
	deadline := start.Add(d)
	st, _, why := judge(&cf.Cases[0], out, manifest.Work{Check: func() error {
		if !time.Now().Before(deadline) {
			return toolerr.New(toolerr.DeadlineExceeded, "deadline")
		}
		return nil
	}})
	if took := time.Since(start); st != StatusFail || took > d+time.Second || !strings.Contains(why, "deadline") {
		t.Fatalf("judge: %v %q after %v (deadline %v)", st, why, took, d)
	}
	st, _, why = judge(&cf.Cases[0], out, manifest.Work{Limit: manifest.MinWorkLimit})
	if st != StatusFail || !strings.Contains(why, "validation budget") {
		t.Fatalf("judge over the budget: %v %q", st, why)
	}
}
