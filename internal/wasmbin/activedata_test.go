package wasmbin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHasActiveData(t *testing.T) {
	hdr := []byte("\x00asm\x01\x00\x00\x00")
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"no data section", hdr, false},
		{"empty data section", append(append([]byte{}, hdr...), 11, 1, 0), false},
		{"one passive segment", append(append([]byte{}, hdr...), 11, 5, 1, 1, 2, 'h', 'i'), false},
		{"one active segment", append(append([]byte{}, hdr...), 11, 7, 1, 0, 0x41, 0, 0x0b, 1, 'h'), true},
		{"passive then active (flag 2)", append(append([]byte{}, hdr...), 11, 10, 2, 1, 1, 'a', 2, 0, 0x41, 0, 0x0b, 0), true},
		{"truncated passive segment", append(append([]byte{}, hdr...), 11, 4, 1, 1, 9, 'h'), true},
		{"section past the end", append(append([]byte{}, hdr...), 11, 9, 1), true},
		{"not wasm", []byte("hello"), true},
	} {
		if got := HasActiveData(tc.b); got != tc.want {
			t.Errorf("%s: HasActiveData = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Real modules: the Go guest has active segments until PassiveData
	// makes them passive.
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "wasm", "go_echo_reactor.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if !HasActiveData(b) {
		t.Fatal("go_echo_reactor has active data segments")
	}
	if p, name := PassiveData(b); name == "" || HasActiveData(p) {
		t.Fatalf("after PassiveData (%q) the module still has active data", name)
	}
}
