package pack_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// checksWasm is the check fixture built from testdata/checks_reactor.
func checksWasm(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/checks_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// echoWasm is a WAT reactor that outputs its input.
func echoWasm(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/wasm/echo_reactor.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b)
}
