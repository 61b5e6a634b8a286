package pack_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCheckFixtureReproducible rebuilds testdata/checks_reactor.wasm from
// its source (the guest SDK's HandleCheck) with the flags of mk/wasm.mk and
// compares it with the committed module.
func TestCheckFixtureReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds checks_reactor, a multi-MB standard-Go guest (seconds without a build cache)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is needed to rebuild the fixture: %v", err)
	}
	out := filepath.Join(t.TempDir(), "checks_reactor.wasm")
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, "./testdata/checks_reactor")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWASM=", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	built, _ := os.ReadFile(out)
	if !bytes.Equal(built, checksWasm(t)) {
		t.Fatalf("testdata/checks_reactor.wasm (%d bytes) is not what its source builds to (%d bytes): rebuild it (see its main.go)", len(checksWasm(t)), len(built))
	}
}
