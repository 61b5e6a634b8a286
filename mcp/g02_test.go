package mcp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/examples"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/server"
)

// postMCP posts one whole JSON-RPC body to /mcp (2025-06-18, as the
// reproducer does).
func postMCP(url, body string) (status int, retryAfter bool, text string, err error) {
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.StatusCode, res.Header.Get("Retry-After") != "", string(b), nil
}

// echoOnly is the smallest pack: the body tests need no guest of their own.
func echoOnly() []server.StaticTool {
	return []server.StaticTool{{Manifest: examples.EchoManifest, Module: examples.EchoWasm}}
}

func callBody(tool string, size int) string {
	head := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"message":"`
	tail := `"}}}`
	return head + strings.Repeat("A", size-len(head)-len(tail)) + tail
}

// TestG02MCPBodiesShareTheBudget (G02): whole MCP bodies sent at once are
// charged to the core's byte budget before they are read (at
// BodyChargeForTest bytes per byte): the ones that fit are answered, the
// rest refused 503 + Retry-After, the budget's peak never passes it, and
// every charge is back when the calls are over. Before the fix /mcp
// bodies were not charged at all.
func TestG02MCPBodiesShareTheBudget(t *testing.T) {
	const budget, size, n = 26 << 20, 2 << 20, 12
	f := newFixture(t, echoOnly(), server.Options{BodyBudget: budget})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	body := callBody("no.such.tool", size)
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		answered, refused int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, ra, text, err := postMCP(ts.URL, body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				refused++ // refused (and closed) before the client finished sending
			case st == http.StatusOK:
				answered++
			case st == http.StatusServiceUnavailable && ra && strings.Contains(text, "byte budget"):
				refused++
			default:
				t.Errorf("status %d retry-after %v: %.200s", st, ra, text)
			}
		}()
	}
	wg.Wait()
	_, peak := f.core.BodyBytes()
	t.Logf("%d × %d MiB MCP bodies, budget %d MiB: %d answered, %d refused; budget peak %.1f MiB",
		n, size>>20, budget>>20, answered, refused, float64(peak)/(1<<20))
	if peak > budget || peak < mcp.BodyChargeForTest*size {
		t.Errorf("budget peak %d: want between one body's charge %d and the budget %d", peak, mcp.BodyChargeForTest*size, budget)
	}
	if answered == 0 || refused == 0 {
		t.Errorf("answered %d, refused %d: want both", answered, refused)
	}
	waitFor(t, "every charge back", func() bool { n, _ := f.core.BodyBytes(); return n == 0 })
	why := 0
	for _, r := range f.logs.records("mcp-http-refused") {
		if r["why"] == "body-budget" && r["status"] == float64(http.StatusServiceUnavailable) {
			why++
		}
	}
	if why == 0 {
		t.Errorf("no mcp-http-refused body-budget event")
	}
}

func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestG02MCPBodyCharge: what the request path of one MCP call holds at
// its peak (the meter's copy, the SDK's two io.ReadAll copies and its
// decode), measured on the live heap with the collector kept close behind
// (GOGC=5), stays within what the body is charged (BodyChargeForTest per
// byte) and one body of slack. A newer SDK that copies bodies more fails
// here: raise the charge.
func TestG02MCPBodyCharge(t *testing.T) {
	f := newFixture(t, echoOnly(), server.Options{BodyBudget: 1 << 30})
	f.core.Handle("/mcp", f.mcp.Handler(mcp.HTTPOptions{}))
	ts := httptest.NewServer(f.core)
	defer ts.Close()
	const size = 8 << 20
	body := callBody("no.such.tool", size)
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	var worst float64
	for range 3 {
		runtime.GC()
		base := liveHeap()
		var peak uint64
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tk := time.NewTicker(200 * time.Microsecond)
			defer tk.Stop()
			for {
				peak = max(peak, liveHeap())
				select {
				case <-stop:
					return
				case <-tk.C:
				}
			}
		}()
		st, _, text, err := postMCP(ts.URL, body)
		close(stop)
		<-done
		if err != nil || st != http.StatusOK {
			t.Fatalf("status %d %v: %.200s", st, err, text)
		}
		worst = max(worst, float64(int64(peak)-int64(base))/size)
	}
	t.Logf("an %d MiB MCP body: request-path heap peak %.2f× the body (charged %d×)", size>>20, worst, mcp.BodyChargeForTest)
	if limit := float64(mcp.BodyChargeForTest + 1); worst > limit {
		t.Errorf("heap peak %.2f× the body > %v×: the charge undercounts", worst, limit)
	}
}

// A Handler mounted anywhere but on the core has no body meter: it answers
// 500 rather than read a body outside the budget and the deadline.
func TestG02MCPHandlerOutsideTheCore(t *testing.T) {
	f := newFixture(t, echoOnly(), server.Options{})
	ts := httptest.NewServer(f.mcp.Handler(mcp.HTTPOptions{}))
	defer ts.Close()
	st, _, text, err := postMCP(ts.URL, callBody("acme.echo", 200))
	if err != nil || st != http.StatusInternalServerError {
		t.Fatalf("status %d %v: %s", st, err, text)
	}
}
