package executor_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Load rewrites a metered module's data segments (dataSegments:
// merged and passive behind an init export for a reactor, merged for a
// command). Guests whose answers are built from their data segments still
// answer correctly, on fresh, recycled and reused instances. Without the
// init call counter's output prefix (a data segment) would be zeros, not
// JSON; a Go guest would not get past its runtime's start-up.
func TestDataSegmentsRewrittenGuestsAnswer(t *testing.T) {
	e := newExecutor(t)
	for _, posture := range []string{"context-isolated", "none"} {
		t.Run(posture, func(t *testing.T) {
			setPosture := func(m map[string]any) { m["sandbox"] = posture }
			counter := load(t, e, "counter", setPosture)
			for i := 1; i <= 3; i++ {
				res, err := invoke(t, counter, `{}`)
				if err != nil {
					t.Fatalf("counter call %d: %v", i, err)
				}
				want := 1 // a fresh or recycled instance
				if posture == "none" {
					want = i // one warm instance, reused
				}
				jsonEqual(t, res.Output, fmt.Sprintf(`{"count":%d}`, want))
			}
			// A WASI command: two data segments 8 bytes apart, merged.
			_, err := invoke(t, load(t, e, "exit_error_command", setPosture), `{}`)
			te := wantCode(t, err, toolerr.HandlerError)
			if te.Message != "fatal: bad thing" || te.Details["exitCode"] != uint32(3) {
				t.Fatalf("exit_error_command: error = %q %v", te.Message, te.Details)
			}
			for _, fx := range []string{"go_echo_reactor", "go_echo_command"} {
				tool := load(t, e, fx, setPosture)
				for i := 0; i < 3; i++ {
					in := fmt.Sprintf(`{"message":"héllo","n":[%d,2.5e3,null]}`, i)
					res, err := invoke(t, tool, in)
					if err != nil {
						t.Fatalf("%s call %d: %v", fx, i, err)
					}
					jsonEqual(t, res.Output, in)
				}
			}
		})
	}
}

// reachInit is `wat2wasm --no-check` of
//
//	(module
//	  (import "sandboxd_v1" "output_set" (func $output_set (param i32 i32) (result i32)))
//	  (memory (export "memory") 1)
//	  (data (i32.const 0) "{}")
//	  (func $handle (export "handle") (result i32)
//	    (loop $l (call 2) (br $l))
//	    (i32.const 0)))
//
// `call 2` names no function (there are two), but the fuel pass shifts it
// past its own import to the index of the data-init function the load
// appends.
const reachInit = "0061736d01000000010b0260027f7f017f6000017f021a010b73616e64626f78645f76310a6f75747075745f7365740000030201010503010001071302066d656d6f727902000668616e646c6500010a0d010b00034010020c000b41000b0b08010041000b027b7d"

// A guest that calls the (unmetered) data-init function in a loop traps at
// its second call instead of copying its data for no fuel until the
// deadline: the function drops each segment it copies.
func TestDataInitCalledByGuestTraps(t *testing.T) {
	wasm, err := hex.DecodeString(reachInit)
	if err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t)
	for _, posture := range []string{"context-isolated", "none"} {
		tool, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", func(m map[string]any) { m["sandbox"] = posture }), executor.WithModule(wasm))
		if err != nil {
			t.Fatalf("%s: load: %v", posture, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err = tool.Invoke(ctx, executor.Request{Input: []byte(`{}`)})
		cancel()
		te := wantCode(t, err, toolerr.HandlerTrap)
		if !strings.Contains(te.Message, "out of bounds") {
			t.Errorf("%s: trap %q, want the out of bounds memory.init of a dropped segment", posture, te.Message)
		}
		t.Logf("%s: trapped after %v", posture, time.Since(start))
		_ = tool.Close(context.Background())
	}
}

// With unmetered modules allowed, a module the fuel pass finds malformed
// is still refused before wazero decodes it: wazero allocates whatever a
// vector count claims, and each of these 13-byte modules claims 2^32-1
// entries (without the refusal the test binary dies: out of memory).
func TestMalformedCountsRefusedWhenUnmeteredAllowed(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithAllowUnmetered(true) })
	const hdr = "\x00asm\x01\x00\x00\x00"
	for name, b := range map[string]string{
		"data":    hdr + "\x05\x03\x01\x00\x01" + "\x0b\x05\xff\xff\xff\xff\x0f",
		"global":  hdr + "\x06\x05\xff\xff\xff\xff\x0f",
		"export":  hdr + "\x07\x05\xff\xff\xff\xff\x0f",
		"element": hdr + "\x09\x05\xff\xff\xff\xff\x0f",
	} {
		_, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", nil), executor.WithModule([]byte(b)))
		te := wantCode(t, err, toolerr.HandlerShapeInvalid)
		if !strings.Contains(te.Message, "malformed") {
			t.Errorf("%s: %q, want it called malformed", name, te.Message)
		}
	}
}

// calleeTypeBomb is a module whose function 0 calls function 1, whose
// declared type (73) does not exist: wazero v1.12's validator looks the
// callee's type up unchecked while validating function 0, before it
// checks function 1's type index, and panics (a 526-byte mutant of a
// repository guest found it; in the compile goroutine the panic ended the
// process).
func calleeTypeBomb() []byte {
	const hdr = "\x00asm\x01\x00\x00\x00"
	return []byte(hdr +
		"\x01\x07\x02\x60\x00\x00\x60\x00\x00" + // two types [] -> []
		"\x03\x03\x02\x00\x49" + // function 0: type 0, function 1: type 73
		"\x0a\x09\x02\x04\x00\x10\x01\x0b\x02\x00\x0b") // call 1; end / end
}

// With unmetered modules allowed, the module that made wazero panic is
// refused at load with handler-shape-invalid naming the function and its
// type, and the executor (the process) goes on serving.
func TestCalleeTypeRefusedWhenUnmeteredAllowed(t *testing.T) {
	e := newExecutor(t, func(c executor.Config) executor.Config { return c.WithAllowUnmetered(true) })
	_, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", nil), executor.WithModule(calleeTypeBomb()))
	te := wantCode(t, err, toolerr.HandlerShapeInvalid)
	if !strings.Contains(te.Message, "function 1 declares type 73") {
		t.Errorf("message %q does not name function 1 and its type", te.Message)
	}
	tool, err := e.Load(context.Background(), manifestFor(t, "echo_reactor", nil))
	if err != nil {
		t.Fatalf("a valid module after the refusal: %v", err)
	}
	_ = tool.Close(context.Background())
}
