package pack

import (
	"encoding/json"
	"fmt"
	"testing"
)

// countingFiles serves one module and counts the bytes it hands out.
type countingFiles struct {
	module      []byte
	reads, sent int
}

func (c *countingFiles) read(name string, max int64) ([]byte, error) {
	c.reads++
	c.sent += len(c.module)
	return append([]byte(nil), c.module...), nil
}

func (c *countingFiles) where(name string) string { return name }

// TestReadEntriesReadsAModuleOnce: an index naming one module in many
// tools read and copied it once per tool (a 16 MiB index can name a large
// module in ~100k tools: that many copies of it); readEntries now reads
// each file once and the tools share its bytes.
func TestReadEntriesReadsAModuleOnce(t *testing.T) {
	files := &countingFiles{module: make([]byte, 1<<20)}
	ix := &Index{V: 1, PackID: "p", PackVersion: "1", ArtifactVersion: "1"}
	for i := range 2000 {
		ix.Tools = append(ix.Tools, IndexTool{ID: fmt.Sprintf("t%04d", i), Input: json.RawMessage(`{}`), Output: json.RawMessage(`{}`), ModulePath: "m.wasm"})
	}
	p, problems := readEntries(ix, "index.json", files, nil)
	if len(problems) > 0 || len(p.Tools) != 2000 {
		t.Fatalf("%d tools, problems %v", len(p.Tools), problems)
	}
	if files.reads != 1 || files.sent != 1<<20 {
		t.Fatalf("the module was read %d times (%d bytes) for 2000 tools", files.reads, files.sent)
	}
	if &p.Tools[0].Module[0] != &p.Tools[1999].Module[0] {
		t.Fatal("the tools do not share the module's bytes")
	}
}
