package sdk

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/abi"
)

// TestGoImportsMatchABI checks every //go:wasmimport in wasm_wasip1.go
// against abi.Functions: the module, the name and the Wasm signature.
func TestGoImportsMatchABI(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "wasm_wasip1.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	wasmType := map[string]abi.ValType{
		"unsafe.Pointer": abi.I32, "int32": abi.I32, "uint32": abi.I32,
		"int64": abi.I64, "uint64": abi.I64,
	}
	seen := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Doc == nil {
			continue
		}
		for _, c := range fd.Doc.List {
			fields := strings.Fields(c.Text)
			if len(fields) == 0 || fields[0] != "//go:wasmimport" {
				continue
			}
			seen++
			if len(fields) != 3 || fields[1] != abi.ModuleName {
				t.Errorf("%s: %q does not import from %s", fd.Name, c.Text, abi.ModuleName)
				continue
			}
			want, ok := abi.Functions[fields[2]]
			if !ok {
				t.Errorf("%s imports %q, which ABI v1 does not define", fd.Name, fields[2])
				continue
			}
			var got abi.Signature
			for _, p := range fd.Type.Params.List {
				vt := wasmType[types(p.Type)]
				for range max(1, len(p.Names)) {
					got.Params = append(got.Params, vt)
				}
			}
			if fd.Type.Results != nil {
				for _, r := range fd.Type.Results.List {
					got.Results = append(got.Results, wasmType[types(r.Type)])
				}
			}
			if !got.Equal(want) {
				t.Errorf("%s (%s): signature %v, ABI v1 has %v", fd.Name, fields[2], got, want)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no //go:wasmimport found in wasm_wasip1.go")
	}
}

func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	}
	return "?"
}

var (
	cImport = regexp.MustCompile(`SANDBOXD_IMPORT\("(\w+)"\)\s*\n(\w+)\s+\w+\(([^)]*)\);`)
	cErrno  = regexp.MustCompile(`(?m)^#define SANDBOXD_E\w+\s+\((-\d+)\)`)
)

// TestCHeaderMatchesABI checks ../c/sandboxd.h: one declaration per ABI v1
// function with its signature, and one constant per error number.
func TestCHeaderMatchesABI(t *testing.T) {
	b, err := os.ReadFile("../c/sandboxd.h")
	if err != nil {
		t.Fatal(err)
	}
	h := string(b)
	cType := func(s string) abi.ValType {
		fields := strings.Fields(strings.ReplaceAll(s, "*", " * "))
		if len(fields) > 0 && (fields[0] == "int64_t" || fields[0] == "uint64_t") && !slices.Contains(fields, "*") {
			return abi.I64
		}
		return abi.I32 // 32-bit integers and wasm32 pointers
	}
	declared := map[string]bool{}
	for _, m := range cImport.FindAllStringSubmatch(h, -1) {
		name, ret, params := m[1], m[2], m[3]
		declared[name] = true
		want, ok := abi.Functions[name]
		if !ok {
			t.Errorf("sandboxd.h declares %q, which ABI v1 does not define", name)
			continue
		}
		var got abi.Signature
		for _, p := range strings.Split(params, ",") {
			if p = strings.TrimSpace(p); p != "" && p != "void" {
				got.Params = append(got.Params, cType(p))
			}
		}
		if ret != "void" {
			got.Results = []abi.ValType{cType(ret)}
		}
		if !got.Equal(want) {
			t.Errorf("sandboxd.h %s: signature %v, ABI v1 has %v", name, got, want)
		}
	}
	for name := range abi.Functions {
		if !declared[name] {
			t.Errorf("sandboxd.h does not declare %s", name)
		}
	}
	var got []string
	for _, m := range cErrno.FindAllStringSubmatch(h, -1) {
		got = append(got, m[1])
	}
	var want []string
	for _, e := range abi.Errnos() {
		want = append(want, strconv.Itoa(int(e)))
	}
	if !slices.Equal(got, want) {
		t.Errorf("sandboxd.h error numbers = %v, want %v", got, want)
	}
}
