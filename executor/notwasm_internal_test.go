package executor

import (
	"strings"
	"testing"
)

// TestNotWasmNamesWhatItIs: a module that is not WebAssembly is named for
// what it is, with what to do (issue 27 §3), and a real module passes.
func TestNotWasmNamesWhatItIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  string
		want string // a prefix of the message; "" for a module
	}{
		{"module", "\x00asm\x01\x00\x00\x00", ""},
		{"empty", "", "the module is empty (0 bytes): build the handler for WebAssembly"},
		{"ELF", "\x7fELF\x02\x01\x01", "the module is an ELF executable (a native Linux build), not WebAssembly: built without GOOS=wasip1 GOARCH=wasm?"},
		{"Mach-O", "\xcf\xfa\xed\xfe\x07", "the module is a Mach-O executable (a native macOS build)"},
		{"PE", "MZ\x90\x00", "the module is a Windows (PE) executable"},
		{"script", "#!/bin/sh\necho hi\n", "the module is a script (it starts with #!)"},
		{"gzip", "\x1f\x8b\x08\x00", "the module is gzip-compressed data"},
		{"zip", "PK\x03\x04", "the module is a zip archive"},
		{"WAT", "  (module (func))", "the module is WebAssembly text (WAT), not the binary format: compile it with wat2wasm"},
		{"Go source", "package main\n", "the module looks like source code"},
		{"JSON", `{"id":"acme.x"}`, "the module is JSON text, not WebAssembly"},
		{"text", "hello, world\n", "the module is text, not WebAssembly"},
		{"component", "\x00asm\x0d\x00\x01\x00", "the module is a WebAssembly component (component model)"},
		{"version 2", "\x00asm\x02\x00\x00\x00", "the module is WebAssembly of binary version 2, not 1"},
		{"bytes", "\x01\x02\x03\x04\x05", "the module is not WebAssembly (it starts with 01 02 03 04, not the magic 00 61 73 6d)"},
	} {
		got := notWasm([]byte(tc.bin))
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want it to start with %q", tc.name, got, tc.want)
		}
	}
}
