package executor

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// notWasm names what bin is when it is not a WebAssembly core module, in
// words that say what to do; "" when bin starts as one (the magic and
// version 1), leaving the rest to the decoder. A user who points a
// manifest at the native build of their handler, its source, a script or
// a compressed layer learns which, instead of "missing magic".
func notWasm(bin []byte) string {
	const fix = "build the handler for WebAssembly (GOOS=wasip1 GOARCH=wasm go build, clang --target=wasm32-wasip1, …) and point codeArtifactRef at the .wasm"
	switch {
	case len(bin) == 0:
		return "the module is empty (0 bytes): " + fix
	case bytes.HasPrefix(bin, []byte("\x00asm\x01\x00\x00\x00")):
		return ""
	case bytes.HasPrefix(bin, []byte("\x00asm")) && len(bin) >= 8 && bin[6] == 0x01 && bin[7] == 0x00:
		return "the module is a WebAssembly component (component model), which sandboxd does not run: build a core module (wasip1, or a reactor with -buildmode=c-shared)"
	case bytes.HasPrefix(bin, []byte("\x00asm")):
		return fmt.Sprintf("the module is WebAssembly of binary version %d, not 1 (the only one wazero reads)", versionOf(bin))
	case bytes.HasPrefix(bin, []byte("\x7fELF")):
		return "the module is an ELF executable (a native Linux build), not WebAssembly: built without GOOS=wasip1 GOARCH=wasm?"
	case hasAnyPrefix(bin, "\xfe\xed\xfa\xce", "\xfe\xed\xfa\xcf", "\xce\xfa\xed\xfe", "\xcf\xfa\xed\xfe"):
		return "the module is a Mach-O executable (a native macOS build), not WebAssembly: built without GOOS=wasip1 GOARCH=wasm?"
	case bytes.HasPrefix(bin, []byte("MZ")):
		return "the module is a Windows (PE) executable, not WebAssembly: built without GOOS=wasip1 GOARCH=wasm?"
	case bytes.HasPrefix(bin, []byte("\x1f\x8b")):
		return "the module is gzip-compressed data, not WebAssembly: decompress it (an OCI layer or a .tar.gz?) and point codeArtifactRef at the .wasm inside"
	case bytes.HasPrefix(bin, []byte("PK\x03\x04")):
		return "the module is a zip archive, not WebAssembly: unpack it and point codeArtifactRef at the .wasm inside"
	case bytes.HasPrefix(bin, []byte("#!")):
		return "the module is a script (it starts with #!), not WebAssembly: " + fix
	}
	text := bytes.TrimLeft(bin[:min(len(bin), 4096)], " \t\r\n\ufeff")
	switch {
	case bytes.HasPrefix(text, []byte("(module")) || bytes.HasPrefix(text, []byte("(component")) || bytes.HasPrefix(text, []byte(";;")):
		return "the module is WebAssembly text (WAT), not the binary format: compile it with wat2wasm and point codeArtifactRef at the .wasm"
	case bytes.HasPrefix(text, []byte("package ")) || bytes.HasPrefix(text, []byte("//")):
		return "the module looks like source code, not WebAssembly: " + fix
	case bytes.HasPrefix(text, []byte("{")) || bytes.HasPrefix(text, []byte("[")):
		return "the module is JSON text, not WebAssembly (is codeArtifactRef.modulePath naming a manifest?)"
	case isText(bin[:min(len(bin), 4096)]):
		return "the module is text, not WebAssembly: " + fix
	}
	return fmt.Sprintf("the module is not WebAssembly (it starts with % x, not the magic 00 61 73 6d): %s", bin[:min(len(bin), 4)], fix)
}

func versionOf(bin []byte) uint32 {
	if len(bin) < 8 {
		return 0
	}
	return uint32(bin[4]) | uint32(bin[5])<<8 | uint32(bin[6])<<16 | uint32(bin[7])<<24
}

func hasAnyPrefix(b []byte, prefixes ...string) bool {
	for _, p := range prefixes {
		if bytes.HasPrefix(b, []byte(p)) {
			return true
		}
	}
	return false
}

// isText reports whether b is valid UTF-8 (a cut last rune allowed) with
// no control bytes other than whitespace.
func isText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
		b = b[n:]
	}
	return true
}
