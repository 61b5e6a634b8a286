package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// BenchmarkInvokeEcho measures the bundled echo tool (acme.echo,
// context-isolated: a fresh instance per call from the pre-warmed pool)
// end to end over loopback HTTP at a fixed client concurrency. It reports
// p50 and p99 latency and calls/s besides ns/op.
//
//	go test -run '^$' -bench InvokeEcho -benchtime 2000x ./server
func BenchmarkInvokeEcho(b *testing.B) {
	benchInvoke(b, echoTool(), invokeBody("acme.echo", `{"message":"hello from sandboxd"}`))
}

// BenchmarkInvokeCounter is the same with the tiny WAT counter fixture
// (context-isolated): what the service costs when instantiating the guest
// is nearly free.
func BenchmarkInvokeCounter(b *testing.B) {
	benchInvoke(b, tool(b, "t.counter", "counter", 16, 1000, nil), invokeBody("t.counter", `{}`))
}

func benchInvoke(b *testing.B, st server.StaticTool, body string) {
	ts := start(b, server.StaticSource{Tools: []server.StaticTool{st}}, server.Options{MaxConcurrency: 16})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	call := func() error {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", ts.url+"/v1/invoke", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("kindgi-pack-token", token)
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		rb, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(rb), `"kind":"result"`) {
			return fmt.Errorf("%d %s", res.StatusCode, rb)
		}
		return nil
	}
	for i := 0; i < 20; i++ { // warm: connections, pool
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			b.ReportAllocs()
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			var next sync.Mutex
			i := 0
			errs := make(chan error, conc)
			b.ResetTimer()
			began := time.Now()
			for g := 0; g < conc; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						next.Lock()
						n := i
						i++
						next.Unlock()
						if n >= b.N {
							return
						}
						t0 := time.Now()
						if err := call(); err != nil {
							errs <- err
							return
						}
						lat[n] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			sort.Slice(lat, func(x, y int) bool { return lat[x] < lat[y] })
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
		})
	}
}
