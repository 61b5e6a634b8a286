package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// leb appends v as unsigned LEB128.
func leb(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func section(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = leb(b, uint32(len(body)))
	return append(b, body...)
}

// slowModule is a reactor that compiles slowly but within the compile
// budget (F16's shape, scaled down): funcs functions each holding one
// loop that updates n i32 locals, each read twice.
func slowModule(funcs, n int) []byte {
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	b = section(b, 1, []byte{2, 0x60, 0, 1, 0x7f, 0x60, 0, 0}) // ()->i32, ()->()
	fn := leb(nil, uint32(funcs+1))
	for range funcs {
		fn = append(fn, 1)
	}
	b = section(b, 3, append(fn, 0))
	b = section(b, 5, []byte{1, 0, 1})
	exp := []byte{2, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 6, 'h', 'a', 'n', 'd', 'l', 'e', 0}
	b = section(b, 7, leb(exp, uint32(funcs)))
	code := leb(nil, uint32(funcs+1))
	for range funcs {
		body := leb([]byte{1}, uint32(n))
		body = append(body, 0x7f, 0x03, 0x40)
		for i := range n {
			body = append(body, 0x20)
			body = leb(body, uint32((i+1)%n))
			body = append(body, 0x20)
			body = leb(body, uint32((i*7)%n))
			body = append(body, 0x6a, 0x21)
			body = leb(body, uint32(i))
		}
		body = append(body, 0x20, 0, 0x0d, 0, 0x0b, 0x0b)
		code = leb(code, uint32(len(body)))
		code = append(code, body...)
	}
	code = append(code, 4, 0, 0x41, 0, 0x0b)
	return section(b, 10, code)
}

// §5 / F16: a reload compiling slow modules keeps /healthz, /readyz and
// calls answering, and a drain (SIGTERM) does not wait for it.
func TestReloadStaysResponsive(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiles modules built to compile slowly (tens of seconds)")
	}
	dir := t.TempDir()
	echo := map[string]any{}
	if err := json.Unmarshal(echoTool().Manifest, &echo); err != nil {
		t.Fatal(err)
	}
	echo["codeArtifactRef"] = map[string]any{"kind": "filesystem", "modulePath": "echo.wasm"}
	writeJSON := func(name string, v any) {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON("echo.tool.json", echo)
	if err := os.WriteFile(filepath.Join(dir, "echo.wasm"), echoTool().Module, 0o644); err != nil {
		t.Fatal(err)
	}
	exec := newExecutor(t, executor.NewConfig().WithDevMode(true).WithCacheDir(t.TempDir()))
	ts := startWith(t, exec, server.DirSource{Dir: dir}, server.Options{DrainTimeout: time.Second})
	// Slow modules (distinct, so none comes from the compilation cache).
	// wazero's compiler is Go code: -race slows it several times.
	funcs := 30
	if raceEnabled {
		funcs = 2
	}
	for k := range 2 {
		name := fmt.Sprintf("slow%d", k)
		if err := os.WriteFile(filepath.Join(dir, name+".wasm"), slowModule(funcs, 4000+k), 0o644); err != nil {
			t.Fatal(err)
		}
		writeJSON(name+".tool.json", map[string]any{"id": "t." + name, "version": "1.0.0", "description": "slow to compile",
			"input": map[string]any{}, "output": map[string]any{}, "limits": map[string]any{"memMB": 16, "cpuMs": 1000},
			"codeArtifactRef": map[string]any{"kind": "filesystem", "modulePath": name + ".wasm"}})
	}
	reloadDone := make(chan error, 1)
	t0 := time.Now()
	go func() { reloadDone <- ts.Reload(context.Background()) }()

	var worst time.Duration
	var n int
	probe := func(method, path, body string) {
		s := time.Now()
		var hdr map[string]string
		var rd io.Reader
		if body != "" {
			hdr, rd = authJSON(), strings.NewReader(body)
		}
		r, err := do(t, context.Background(), method, ts.url+path, rd, hdr)
		if err != nil || r.status != http.StatusOK {
			t.Errorf("%s %s during reload: %v %v", method, path, err, r)
			return
		}
		worst = max(worst, time.Since(s))
		n++
	}
	var reloadTook time.Duration
	var reloadErr error
loop:
	for {
		select {
		case reloadErr = <-reloadDone:
			reloadTook = time.Since(t0)
			break loop
		case <-time.After(20 * time.Millisecond):
		}
		probe(http.MethodGet, "/healthz", "")
		probe(http.MethodGet, "/readyz", "")
		probe(http.MethodPost, "/v1/invoke", invokeBody("acme.echo", `{"message":"x"}`))
		if time.Since(t0) > 120*time.Second {
			t.Fatal("reload still running after 120 s")
		}
	}
	bound := 250 * time.Millisecond
	if raceEnabled {
		bound = time.Second
	}
	t.Logf("reload of 2 slow modules took %v (%v); %d probes meanwhile, slowest %v (bound %v)", reloadTook, reloadErr, n, worst, bound)
	if reloadErr != nil {
		t.Fatalf("reload: %v", reloadErr)
	}
	if reloadTook < 500*time.Millisecond {
		t.Logf("the modules compiled fast (%v): the probes measured little", reloadTook)
	}
	if worst > bound {
		t.Errorf("a probe took %v during the reload", worst)
	}

	// A drain while a reload compiles does not wait for the reload.
	for k := range 2 { // new bytes: compiled again
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("slow%d.wasm", k)), slowModule(funcs, 4100+k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = ts.Reload(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	t1 := time.Now()
	ts.cancel()
	select {
	case <-ts.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	ts.done <- nil
	took := time.Since(t1)
	t.Logf("drain during a reload: Serve returned after %v", took)
	if took > 1500*time.Millisecond {
		t.Errorf("drain took %v while a reload compiled (nothing in flight)", took)
	}
	wg.Wait()
}
