package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// BenchmarkServeVsFloor measures a 1 KiB validated echo (the WAT echo
// fixture, context-isolated) through server.Server over a real loopback
// listener with keep-alive, beside a minimal net/http JSON echo (decode
// the frame, encode the answer) on the same kind of listener, at c=1 and
// c=8, in one run. It reports process CPU per call (client and server
// are both in this process, so the ratio understates the server's share)
// besides ns/op and allocs/op (both sides too).
//
//	go test -run '^$' -bench ServeVsFloor -benchmem -benchtime 3000x ./server
func BenchmarkServeVsFloor(b *testing.B) {
	in := `{"data":"` + strings.Repeat("x", 1024) + `"}`
	st := tool(b, "bench.echo", "echo_reactor", 64, 5000, map[string]any{
		"input":  json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
		"output": json.RawMessage(`{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`),
	})
	ts := start(b, server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{MaxConcurrency: 16})
	floor := startFloor(b)
	body := []byte(invokeBody("bench.echo", in))
	for _, conc := range []int{1, 8} {
		for _, side := range []struct{ name, url string }{{"floor", floor}, {"serve", ts.url}} {
			b.Run(fmt.Sprintf("%s/c%d", side.name, conc), func(b *testing.B) {
				loadLoop(b, side.url+"/v1/invoke", body, conc)
			})
		}
	}
}

// startFloor runs the floor: net/http decoding the invoke frame and
// answering {"v":2,"kind":"result","output":<input>}.
func startFloor(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Input json.RawMessage `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			V      int             `json:"v"`
			Kind   string          `json:"kind"`
			Output json.RawMessage `json:"output"`
		}{2, "result", f.Input})
	})}
	go func() { _ = hs.Serve(ln) }()
	tb.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadLoop posts body b.N times from conc goroutines on keep-alive
// connections and reports cpu-us/op and calls/s.
func loadLoop(b *testing.B, url string, body []byte, conc int) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	call := func() error {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", url, bytes.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", token)
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		rb, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !bytes.Contains(rb, []byte(`"kind":"result"`)) {
			return fmt.Errorf("%d %s", res.StatusCode, rb)
		}
		return nil
	}
	for i := 0; i < 20; i++ {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var mu sync.Mutex
	n := 0
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0, t0 := processCPU(), time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				k := n
				n++
				mu.Unlock()
				if k >= b.N {
					return
				}
				if err := call(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	cpu, el := processCPU()-cpu0, time.Since(t0)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
}
