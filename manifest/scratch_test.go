package manifest

import (
	"fmt"
	"strings"
	"testing"
)

func BenchmarkScratchWide(b *testing.B) {
	n := 10000
	var sb strings.Builder
	sb.WriteString(`{"properties":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"p%d":{"type":"string","minLength":1}`, i)
	}
	sb.WriteString(`}}`)
	m := []byte(fmt.Sprintf(`{"id":"t","description":"d","version":"1.0.0","input":%s,"output":{}}`, sb.String()))
	for i := 0; i < b.N; i++ {
		Load(m)
	}
}
