package pack_test

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/pack"
)

func TestParseBundleMap(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"kindgi's own", `{"tools/echo/index.ts":"tools/echo/index.mjs"}`, ""},
		{"dot slash and export", `{"./tools/a.ts":"./tools/a.wasm#default"}`, ""},
		{"null", `null`, "got null"},
		{"not an object", `[]`, "JSON object"},
		{"non-string", `{"a":1}`, "JSON object"},
		{"escapes", `{"a.ts":"../a.wasm"}`, "inside the module root"},
		{"absolute", `{"a.ts":"/etc/a.wasm"}`, "inside the module root"},
		{"backslash", `{"a.ts":"tools\\a.wasm"}`, "inside the module root"},
		{"bad key", `{"../a.ts":"a.wasm"}`, "source path"},
		{"empty export", `{"a.ts":"a.wasm#"}`, "#export is empty"},
		{"duplicate after cleaning", `{"a.ts":"a.wasm","./a.ts":"b.wasm"}`, "twice"},
		{"trailing data", `{} {}`, "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pack.ParseBundleMap([]byte(tc.in))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("ParseBundleMap(%s) = %v; want error containing %q", tc.in, err, tc.err)
			}
		})
	}
}

func TestModuleCandidates(t *testing.T) {
	bm, err := pack.ParseBundleMap([]byte(`{"tools/echo/index.ts":"dist/echo.mjs","tools/a.ts":"a.wasm#handle","tools/b.ts":"b.wasm#record"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want, err string }{
		{"tools/echo/index.ts", "dist/echo.mjs dist/echo.wasm", ""},
		{"./tools/echo/index.ts", "dist/echo.mjs dist/echo.wasm", ""}, // keys are cleaned alike
		{"tools/a.ts", "a.wasm", ""},
		{"tools/other.ts", "tools/other.ts tools/other.wasm", ""}, // not in the map: itself
		{"tools/x.wasm", "tools/x.wasm", ""},
		{"tools/x.wasm#count_vowels", "tools/x.wasm", ""},                 // an Extism entry suffix names no file
		{"tools/echo/index.ts#greet", "dist/echo.mjs dist/echo.wasm", ""}, // found in the map without it
		{"tools/b.ts", "", `cannot select export "record"`},
		{"../x.wasm", "", "inside the module root"},
	} {
		got, err := pack.ModuleCandidates(tc.path, bm)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ModuleCandidates(%s) = %v, %v; want error %q", tc.path, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("ModuleCandidates(%s) = %v, %v; want %s", tc.path, got, err, tc.want)
		}
	}
}
