package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// The three echo implementations the suite compares return their input
// byte for byte at every payload size the suite uses (and at sizes that
// leave a tail for Extism's 8-byte loads).
func TestEchoImplementationsAgree(t *testing.T) {
	r := root(t)
	e := newExecutor(t, t.TempDir(), 1)
	sd := loadTool(t, e, toolManifest("bench.echo", fsRef(filepath.Join(r, "testdata/wasm/echo_reactor.wasm")), true, "context-isolated", 5000))
	ex := extismInstance(t, newExtism(t, readFile(t, "testdata/extism_echo.wasm"), 0, false))
	for _, n := range []int{0, 1, 7, 1024, 1029, 64 << 10, 200 << 10} {
		in := payload(n)
		res, err := sd.Invoke(context.Background(), executor.Request{Input: in})
		if err != nil {
			t.Fatalf("sandboxd %d: %v", n, err)
		}
		if !bytes.Equal(res.Output, in) {
			t.Fatalf("sandboxd %d: output differs", n)
		}
		out, err := extismCall(ex, "run", in)
		if err != nil {
			t.Fatalf("extism %d: %v", n, err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("extism %d: output differs (%d bytes, want %d)", n, len(out), len(in))
		}
		if !bytes.Equal(nativeEcho(in), in) {
			t.Fatalf("native %d: output differs", n)
		}
	}
	// Validation is really on: a wrong shape fails.
	if _, err := sd.Invoke(context.Background(), executor.Request{Input: []byte(`{"data":1}`)}); err == nil {
		t.Fatal("validated echo accepted {\"data\":1}")
	}
}

// The spin guest runs to completion under Extism and under sandboxd, and
// sandboxd's CPU limit stops it when the budget is smaller than its work.
func TestSpinGuest(t *testing.T) {
	r := root(t)
	_ = r
	ex := extismInstance(t, newExtism(t, readFile(t, "testdata/spin.wasm"), 0, false))
	if _, err := extismCall(ex, "run", nil); err != nil {
		t.Fatal(err)
	}
	spin, _ := filepath.Abs("testdata/spin.wasm")
	e := newExecutor(t, t.TempDir(), 0)
	tool := loadTool(t, e, toolManifest("bench.spin", fsRef(spin), false, "none", 10000))
	if _, err := tool.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	tight := loadTool(t, e, toolManifest("bench.spin1", fsRef(spin), false, "none", 1))
	for i := 0; i < 20; i++ { // 2^24 iterations take well over 1 ms of CPU
		if _, err := tight.Invoke(context.Background(), executor.Request{Input: []byte(`{}`)}); err != nil {
			return
		}
	}
	t.Fatal("cpuMs 1 never stopped the spin guest")
}
