package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// WAT compiles WebAssembly text with wat2wasm, flags (such as
// "--enable-threads") before the file. wat2wasm is a CI dependency: under
// CI=true a missing one fails the test, elsewhere it skips it.
func WAT(t testing.TB, src string, flags ...string) []byte {
	t.Helper()
	in := filepath.Join(t.TempDir(), "m.wat")
	if err := os.WriteFile(in, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return wat2wasm(t, in, flags)
}

// WATFile compiles the WebAssembly text file at path, relative to the
// sandboxd module's root (Root), as WAT does.
func WATFile(t testing.TB, path string, flags ...string) []byte {
	t.Helper()
	return wat2wasm(t, filepath.Join(Root(t), path), flags)
}

func wat2wasm(t testing.TB, in string, flags []string) []byte {
	t.Helper()
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("wat2wasm is not on PATH; CI=true requires it")
		}
		t.Skip("wat2wasm is not on PATH")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(in)+".wasm")
	args := append(append([]string{}, flags...), "-o", out, in)
	if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm %s: %v\n%s", filepath.Base(in), err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
