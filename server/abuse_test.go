package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// heapSampler records the peak of the Go heap's live objects while it runs
// (sampled every millisecond), relative to the level when it started.
type heapSampler struct {
	base uint64
	stop chan struct{}
	done chan uint64
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	runtime.GC()
	h := &heapSampler{base: heapObjects(), stop: make(chan struct{}), done: make(chan uint64, 1)}
	go func() {
		var peak uint64
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			peak = max(peak, heapObjects())
			select {
			case <-h.stop:
				h.done <- peak
				return
			case <-tk.C:
			}
		}
	}()
	return h
}

// peakDelta stops the sampler and returns the peak growth in bytes.
func (h *heapSampler) peakDelta() int64 {
	close(h.stop)
	return int64(<-h.done) - int64(h.base)
}

// F15: unknown tool ids are one metrics series, and ids are cut in call
// records, so a caller cannot grow the process or /metrics with them.
func TestF15MetricsToolIDCardinality(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	ts.invoke(t, invokeBody("acme.echo", `{"message":"x"}`))
	const size = 100_000
	n := 200
	if raceEnabled || testing.Short() {
		n = 50 // a 100 KB frame's parse is slow under -race; 5 MB of ids still overrun the 4 MiB growth bound
	}
	runtime.GC()
	before := heapObjects()
	for i := range n {
		id := fmt.Sprintf("%06d-", i) + strings.Repeat("x", size)
		r := ts.invoke(t, invokeBody(id, `{}`))
		wantError(t, r, "tool-not-in-pack")
	}
	r, err := do(t, context.Background(), http.MethodGet, ts.url+"/metrics", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	after := heapObjects()
	growth := int64(after) - int64(before)
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`tool="([^"]*)"`).FindAllStringSubmatch(string(r.body), -1) {
		labels[m[1]] = true
	}
	t.Logf("%d unknown ids of %d bytes: /metrics %d bytes, %d tool labels %v, heap growth %d KiB",
		n, size, len(r.body), len(labels), keys(labels), growth>>10)
	if len(labels) != 2 || !labels["acme.echo"] || !labels[server.UnknownToolLabel] {
		t.Errorf("tool labels %v, want acme.echo and %s only", keys(labels), server.UnknownToolLabel)
	}
	if len(r.body) > 64<<10 {
		t.Errorf("/metrics is %d bytes after unknown ids", len(r.body))
	}
	if want := fmt.Sprintf(`sandboxd_invocations_total{tool=%q,outcome="tool-not-in-pack"} %d`, server.UnknownToolLabel, n); !strings.Contains(string(r.body), want) {
		t.Errorf("metrics lack %q", want)
	}
	// 200 ids of 100 KB are 20 MB; what stays must not scale with them.
	if growth > 4<<20 {
		t.Errorf("heap grew %d bytes after %d unknown ids", growth, n)
	}
	calls := ts.logs.records(t, "call")
	for _, c := range calls {
		id, _ := c["id"].(string)
		if len(id) > server.MaxLoggedIDBytes+32 {
			t.Fatalf("call record id of %d bytes", len(id))
		}
	}
	if last, _ := calls[len(calls)-1]["id"].(string); !strings.HasSuffix(last, fmt.Sprintf("…(%d bytes)", size+7)) {
		t.Errorf("a cut id carries no marker: %q", last)
	}
	if len(ts.logs.String()) > n*2048 {
		t.Errorf("process log is %d bytes for %d calls", len(ts.logs.String()), n)
	}
}

// F15 variant: tenant, run and request ids are caller-chosen too.
func TestF15CallRecordContextIDsBounded(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	long := strings.Repeat("t", 50_000)
	body := fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{"message":"x"},"ctx":{"tenantId":%q,"runId":%q,"requestId":%q}}`, long, long, long)
	wantResult(t, ts.invoke(t, body), "")
	body = fmt.Sprintf(`{"v":2,"kind":"check-invoke","check":{"id":%q},"config":{},"trace":[]}`, long)
	wantError(t, ts.invoke(t, body), "check-not-in-pack")
	for _, c := range ts.logs.records(t, "call") {
		for _, k := range []string{"id", "tenantId", "runId", "requestId"} {
			if v, _ := c[k].(string); len(v) > server.MaxLoggedIDBytes+32 {
				t.Errorf("call record %s of %d bytes", k, len(v))
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// F14: bodies are charged to a byte budget before they are read: 40
// concurrent 10 MB bodies hold at most the budget, the rest are refused
// (503) unread.
func TestF14BodyBeforeAdmission(t *testing.T) {
	const budget = 32 << 20
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{BodyBudget: budget})
	pad := strings.Repeat("x", 10_000_000-200)
	body := []byte(invokeBody("no.such.tool", fmt.Sprintf(`{"pad":%q}`, pad)))
	if len(body) > server.MaxBodyBytes {
		t.Fatalf("body %d bytes", len(body))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	hs := startHeapSampler()
	var (
		wg                              sync.WaitGroup
		mu                              sync.Mutex
		answered, refused, transportErr int
	)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, ts.url+"/v1/invoke", bytes.NewReader(body))
			for k, v := range authJSON() {
				req.Header.Set(k, v)
			}
			res, err := cl.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				transportErr++ // refused before the client finished sending
				return
			}
			defer res.Body.Close()
			_, _ = io.Copy(io.Discard, res.Body)
			switch res.StatusCode {
			case http.StatusOK:
				answered++
			case http.StatusServiceUnavailable:
				if res.Header.Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
				refused++
			default:
				t.Errorf("status %d", res.StatusCode)
			}
		}()
	}
	wg.Wait()
	growth := hs.peakDelta()
	inFlight, peak := ts.BodyBytes()
	t.Logf("40 × %d-byte bodies, budget %d MiB: %d answered, %d refused 503, %d cut while sending; budget peak %.1f MiB; heap peak growth %.1f MiB",
		len(body), budget>>20, answered, refused, transportErr, float64(peak)/(1<<20), float64(growth)/(1<<20))
	if peak > budget {
		t.Errorf("budget peak %d > %d", peak, budget)
	}
	if inFlight != 0 {
		t.Errorf("%d body bytes still charged after every call ended", inFlight)
	}
	if answered == 0 || refused+transportErr == 0 {
		t.Errorf("answered %d, refused %d+%d: want both", answered, refused, transportErr)
	}
	// The client's one shared body is 10 MB of the heap; the server's
	// bodies may hold the budget; the rest is slack for buffers.
	if lim := int64(budget) + int64(len(body)) + 32<<20; growth > lim {
		t.Errorf("heap peak growth %d > %d", growth, lim)
	}
	if v := ts.metric(t, `sandboxd_rejected_total{reason="body-budget"}`); v == "" || v == "0" {
		t.Errorf("body-budget rejections not counted: %q", v)
	}
}

// F14: a chunked body (no Content-Length) is charged as it grows.
func TestF14ChunkedBodyCharged(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{BodyBudget: 1 << 20})
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte(" "), 64<<10)
		_, _ = pw.Write([]byte(`{"v":2,`))
		for range 80 { // 5 MiB of whitespace
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, ts.url+"/v1/invoke", pr)
	for k, v := range authJSON() {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err == nil {
		defer res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d for a chunked body over the budget", res.StatusCode)
		}
	}
	_ = pr.CloseWithError(io.ErrClosedPipe)
	_, peak := ts.BodyBytes()
	t.Logf("chunked 5 MiB body, budget 1 MiB: peak charged %d KiB", peak>>10)
	if peak > 1<<20 {
		t.Errorf("peak %d over the budget", peak)
	}
	eventually(t, "the charge released", func() bool { n, _ := ts.BodyBytes(); return n == 0 })
}

// F14: the body deadline is independent of kindgi-timeout-ms: a body that
// trickles is cut at BodyTimeout even when the call may last a minute.
func TestF14SlowBodyCutAtBodyDeadline(t *testing.T) {
	const bodyTimeout = 300 * time.Millisecond
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{BodyTimeout: bodyTimeout})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t0 := time.Now()
	fmt.Fprintf(conn, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nkindgi-pack-token: %s\r\nkindgi-timeout-ms: 60000\r\nContent-Length: 100\r\n\r\n{\"v\":2,", token)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	took := time.Since(t0)
	b, _ := io.ReadAll(res.Body)
	r := &response{res.StatusCode, res.Header, b}
	checkAnswer(t, r)
	m := wantError(t, r, "deadline-exceeded")
	t.Logf("slow body answered after %v (body deadline %v, call deadline 60 s): %v", took, bodyTimeout, m["message"])
	if took > bodyTimeout+2*time.Second {
		t.Errorf("answered after %v", took)
	}
	if !strings.Contains(fmt.Sprint(m["message"]), "body deadline") {
		t.Errorf("message %q", m["message"])
	}
	eventually(t, "the charge released", func() bool { n, _ := ts.BodyBytes(); return n == 0 })
}

// rssWatch measures the process's peak RSS growth: it resets the kernel's
// high-water mark (/proc/self/clear_refs) and reads VmHWM against VmRSS.
type rssWatch struct{ base int64 }

func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return -1
}

func startRSSWatch() *rssWatch {
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return nil
	}
	return &rssWatch{base: procStatus("VmRSS")}
}

// growth is the peak RSS growth since the watch began (-1: unknown).
func (w *rssWatch) growth() int64 {
	if w == nil || w.base < 0 {
		return -1
	}
	return procStatus("VmHWM") - w.base
}

// rssBound is the RSS growth to assert: under -race the detector's shadow
// memory (several times the heap) counts in RSS, so only the heap is
// asserted there (the RSS is still logged).
func rssBound(rss int64) int64 {
	if raceEnabled {
		return 0
	}
	return rss
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// F18 finding shape through serve: a 2 MB input {"a":[0,…]} against items
// string. It is refused within the tool's memMB (16): one issue, a small
// answer, at once, with memory bounded by memMB.
func TestF18ServeInputBounded(t *testing.T) {
	itemsString := map[string]any{"type": "object", "properties": map[string]any{
		"a": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}}
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{
		tool(t, "t.in16", "echo_reactor", 16, 1000, map[string]any{"input": itemsString}),
		tool(t, "t.in64", "echo_reactor", 64, 1000, map[string]any{"input": itemsString}),
	}}, server.Options{})
	for _, tc := range []struct {
		tool   string
		memMB  int64
		n      int
		issues int
	}{
		{"t.in16", 16, 1_000_000, 1}, // over the budget: refused unvalidated
		{"t.in64", 64, 100_000, 101}, // within it: validated, issues capped
	} {
		input := `{"a":[0` + strings.Repeat(",0", tc.n-1) + `]}`
		body := invokeBody(tc.tool, input)
		hs, rw := startHeapSampler(), startRSSWatch()
		t0 := time.Now()
		r := ts.invoke(t, body)
		took := time.Since(t0)
		heap, rss := hs.peakDelta(), rw.growth()
		m := wantError(t, r, "input-validation-failed")
		issues, _ := m["issues"].([]any)
		t.Logf("%s memMB %d, %d-byte input (%d items): %d issues, answer %d bytes, %v, heap peak +%.1f MiB, RSS peak +%.1f MiB",
			tc.tool, tc.memMB, len(input), tc.n, len(issues), len(r.body), took, mib(heap), mib(rss))
		if len(issues) != tc.issues || len(r.body) > 1<<20 {
			t.Errorf("%d issues, answer %d bytes", len(issues), len(r.body))
		}
		// memMB × 1.25 + 32 MiB, plus the request body (charged to the
		// body budget: twice its size).
		lim := tc.memMB<<20*5/4 + 32<<20 + 2*int64(len(body))
		if heap > lim || rssBound(rss) > lim {
			t.Errorf("heap +%d / RSS +%d > %d", heap, rss, lim)
		}
		if took > 5*time.Second {
			t.Errorf("took %v", took)
		}
	}
}

// F18 finding shape: a memMB-42 guest outputs a 16 MB [0,…] (8M values)
// against items string. Its validation would need gigabytes: it is
// refused within the call's memMB headroom, at once.
func TestF18ServeFailingOutputBounded(t *testing.T) {
	out := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{
		tool(t, "t.arr42", "f18_array_output", 42, 10_000, map[string]any{"input": map[string]any{"type": "integer"}, "output": out}),
	}}, server.Options{})
	ts.invoke(t, invokeBody("t.arr42", "100")) // warm up
	hs, rw := startHeapSampler(), startRSSWatch()
	t0 := time.Now()
	r := ts.invoke(t, invokeBody("t.arr42", "16000000"))
	took := time.Since(t0)
	heap, rss := hs.peakDelta(), rw.growth()
	m := wantError(t, r, "output-validation-failed")
	t.Logf("memMB 42, 16 MB failing output: %q, answer %d bytes, %v, usage %s, heap peak +%.1f MiB, RSS peak +%.1f MiB",
		m["message"], len(r.body), took, r.header.Get("sandboxd-usage"), mib(heap), mib(rss))
	if lim := int64(42<<20)*5/4 + 32<<20; heap > lim || rssBound(rss) > lim {
		t.Errorf("heap +%d / RSS +%d > %d", heap, rss, lim)
	}
	if len(r.body) > 1<<20 || took > 10*time.Second {
		t.Errorf("answer %d bytes after %v", len(r.body), took)
	}
}

// F18 finding shape: a big valid output under a big memMB (64 MB of
// [0,…] under memMB 200, schema {}) is checked without a tree and written
// as it is; with a schema that needs the tree it is refused in the
// headroom instead of holding gigabytes.
func TestF18ServeBigValidOutput(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{
		tool(t, "t.any", "f18_array_output", 200, 20_000, map[string]any{"input": map[string]any{"type": "integer"}}),
		tool(t, "t.arr", "f18_array_output", 200, 20_000, map[string]any{"input": map[string]any{"type": "integer"},
			"output": map[string]any{"type": "array"}}),
	}}, server.Options{})
	for _, tc := range []struct{ tool, code string }{{"t.any", ""}, {"t.arr", "output-validation-failed"}} {
		ts.invoke(t, invokeBody(tc.tool, "100"))
		hs, rw := startHeapSampler(), startRSSWatch()
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, ts.url+"/v1/invoke", strings.NewReader(invokeBody(tc.tool, "64000000")))
		for k, v := range authJSON() {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 200)
		n, _ := io.ReadFull(res.Body, head)
		rest, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		took := time.Since(t0)
		heap, rss := hs.peakDelta(), rw.growth()
		t.Logf("%s memMB 200, 64 MB output: %d, %d-byte answer %.80q…, %v, usage %s, heap peak +%.1f MiB, RSS peak +%.1f MiB",
			tc.tool, res.StatusCode, int64(n)+rest, head[:n], took, res.Header.Get("sandboxd-usage"), mib(heap), mib(rss))
		if tc.code == "" && !bytes.HasPrefix(head, []byte(`{"v":2,"kind":"result","output":[0,0,`)) {
			t.Errorf("%s: answer %q", tc.tool, head[:n])
		}
		if tc.code != "" && !bytes.Contains(head, []byte(`"code":"`+tc.code+`"`)) {
			t.Errorf("%s: answer %q", tc.tool, head[:n])
		}
		if lim := int64(200<<20)*5/4 + 32<<20; heap > lim || rssBound(rss) > lim {
			t.Errorf("%s: heap +%d / RSS +%d > %d", tc.tool, heap, rss, lim)
		}
	}
}
