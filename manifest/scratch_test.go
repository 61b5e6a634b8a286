package manifest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestScratch(t *testing.T) {
	for _, n := range []int{100, 1000, 3000, 9990} {
		schema := strings.Repeat(`{"properties":{"a":`, n) + `{}` + strings.Repeat(`}}`, n)
		m := fmt.Sprintf(`{"id":"t","description":"d","version":"1.0.0","input":%s,"output":{}}`, schema)
		st := time.Now()
		_, err := Load([]byte(m))
		fmt.Println("nested props", n, time.Since(st), err != nil)
	}
	for _, n := range []int{100, 1000, 4900} {
		schema := strings.Repeat(`{"items":`, n) + `{"type":"string"}` + strings.Repeat(`}`, n)
		m := fmt.Sprintf(`{"id":"t","description":"d","version":"1.0.0","input":%s,"output":{}}`, schema)
		st := time.Now()
		tool, err := Load([]byte(m))
		fmt.Println("nested items", n, time.Since(st), err)
		in := strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
		st = time.Now()
		_, err = tool.ValidateInput([]byte(in))
		fmt.Println("  validate", time.Since(st), len(err.Error()))
	}
	in := strings.Repeat("[", 9999) + strings.Repeat("]", 9999)
	tool, _ := Load([]byte(`{"id":"t","description":"d","version":"1.0.0","input":{"$ref":"#/$defs/x","$defs":{"x":{"type":"array","items":{"$ref":"#/$defs/x"}}}},"output":{}}`))
	st := time.Now()
	_, err := tool.ValidateInput([]byte(in))
	fmt.Println("deep recursive", time.Since(st), err)
	_, err = tool.ValidateInput([]byte(strings.Repeat("[", 10001) + strings.Repeat("]", 10001)))
	fmt.Println("too deep", err)
}
