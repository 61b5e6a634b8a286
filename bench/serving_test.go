package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/server"
)

// quick shrinks the serving rows' measuring times (a smoke run:
// go test -run TestServingSmoke . -args -quick).
var quick = flag.Bool("quick", false, "measure the serving rows briefly (smoke run; figures meaningless)")

// span is d, or a tenth of it with -quick.
func span(d time.Duration) time.Duration {
	if *quick {
		return d / 10
	}
	return d
}

// TestServingSmoke runs the serving rows and the other rows of issue 17's
// table once (use -args -quick) and logs the markdown with the goals
// table; it checks that every call succeeds, not the figures.
func TestServingSmoke(t *testing.T) {
	if *out != "" {
		t.Skip("part of TestSuite")
	}
	if !*quick {
		t.Skip("run with -args -quick")
	}
	goals = nil
	r := &report{}
	serving(t, r)
	goLoopInterruption(t, r)
	instantiation(t, r)
	memory(t, r)
	t.Log("\n" + r.b.String())
	if len(goals) != 10 {
		t.Fatalf("%d goal rows, want the 10 of issue 17's table", len(goals))
	}
}

// serving writes the rows of issue 17's table that concern a server:
// scaling with a control, serve over HTTP against a net/http floor, the
// fresh-instance cost, and paced against back-to-back calls.
func serving(t *testing.T, r *report) {
	scaling(t, r)
	serveVsFloor(t, r)
	freshCost(t, r)
	paced(t, r)
}

// scalingControlMin is the control's GOMAXPROCS 1→2 scaling below which
// the machine is taken to be loaded and no scaling figure is reported.
const scalingControlMin = 1.8

func scaling(t *testing.T, r *report) {
	ctx := context.Background()
	cache := t.TempDir()
	in := payload(1 << 10)
	path := filepath.Join(root(t), "testdata/wasm/echo_reactor.wasm")
	iso := loadTool(t, newExecutor(t, cache, 8), toolManifest("bench.scale", fsRef(path), true, "context-isolated", 5000))
	none := loadTool(t, newExecutor(t, cache, 8), toolManifest("bench.scale", fsRef(path), true, "none", 5000))
	native := nativeScalingCase(t, path)
	cases := []callCase{
		{"pure-CPU control (sha256, no allocation)", scalingControl(in)},
		{"sandboxd context-isolated (pool, recycled)", func() error { _, err := iso.Invoke(ctx, executor.Request{Input: in}); return err }},
		{"sandboxd none (reused instance)", func() error { _, err := none.Invoke(ctx, executor.Request{Input: in}); return err }},
		{nativeScalingName, func() error { _, err := native(in); return err }},
	}
	// Rounds alternate GOMAXPROCS 1 and 2, each case for a slice at each,
	// so load changes fall on every case and both settings alike.
	const goroutines = 4
	rounds, slice := 4, span(300*time.Millisecond)
	calls := make([][2]int64, len(cases))
	secs := make([][2]float64, len(cases))
	for round := 0; round < rounds; round++ {
		for pi, procs := range []int{1, 2} {
			prev := runtime.GOMAXPROCS(procs)
			for ci, c := range cases {
				n, el, err := hammer(c.fn, goroutines, slice)
				if err != nil {
					runtime.GOMAXPROCS(prev)
					t.Fatal(err)
				}
				calls[ci][pi] += n
				secs[ci][pi] += el.Seconds()
			}
			runtime.GOMAXPROCS(prev)
		}
	}
	rate := func(ci, pi int) float64 { return float64(calls[ci][pi]) / secs[ci][pi] }
	ctl := rate(0, 1) / rate(0, 0)
	r.p("## Scaling GOMAXPROCS 1 → 2 (goal ≥ 1.8×)")
	r.p("")
	r.p("1 KiB validated echo (WAT guest), %d goroutines; %d rounds alternate GOMAXPROCS 1 and 2, every case %s at each. The pure-CPU control shows what the machine gives: when it scales below %.1f× the machine is loaded and the other rows' scaling is not reported. The machine has %d CPUs. The last row is a second control with no goal: the same validated echo as a native Go function (sandboxd's validator, no Wasm, no sandbox), a workload that allocates and touches memory as a call does, to show how much such work scales on this machine.", goroutines, rounds, slice, scalingControlMin, runtime.NumCPU())
	r.p("")
	r.p("| case | calls/s GOMAXPROCS=1 | calls/s GOMAXPROCS=2 | scaling 2/1 | goal ≥ 1.8× |")
	r.p("|---|---:|---:|---:|---|")
	for ci, c := range cases {
		x := rate(ci, 1) / rate(ci, 0)
		sc, v := fmt.Sprintf("%.2f×", x), "(the control)"
		row := "throughput scaling GOMAXPROCS 1 → 2, 1 KiB validated echo, " + c.name
		switch {
		case ci == 0:
		case c.name == nativeScalingName:
			v = "(a second control: no goal)"
		case ctl < scalingControlMin:
			sc = fmt.Sprintf("not reported: control %.2f×, machine loaded", ctl)
			v = addUnjudged(row, fmt.Sprintf("%.2f× (control %.2f×)", x, ctl), "≥ 1.8×, never below 1× under load",
				fmt.Sprintf("machine loaded; under load ≥ 1×: %s", verdict(x >= 1)))
		default:
			v = addGoal(row, fmt.Sprintf("%.2f× (control %.2f×)", x, ctl), "≥ 1.8×, never below 1× under load", x >= 1.8)
		}
		r.p("| %s | %.0f | %.0f | %s | %s |", c.name, rate(ci, 0), rate(ci, 1), sc, v)
	}
	r.p("")
}

// nativeScalingName names the scaling table's second control.
const nativeScalingName = "native Go validated echo (second control, no Wasm)"

// nativeScalingCase is the 1 KiB validated echo as a native Go function
// (nativeValidated), with the scaling tools' schemas.
func nativeScalingCase(tb testing.TB, wasm string) func([]byte) (json.RawMessage, error) {
	tb.Helper()
	mt, err := manifest.Load(toolManifest("bench.scale-native", fsRef(wasm), true, "none", 5000))
	if err != nil {
		tb.Fatal(err)
	}
	return func(in []byte) (json.RawMessage, error) { return nativeValidated(mt, in) }
}

// scalingControl is the scaling rows' pure-CPU case: sha256 over in, 21
// times, no allocation and no shared state but the result's sink (one
// atomic add per call).
func scalingControl(in []byte) func() error {
	var sink atomic.Uint64
	return func() error {
		h := sha256.Sum256(in)
		for i := 0; i < 20; i++ {
			h = sha256.Sum256(h[:])
		}
		sink.Add(uint64(h[0]))
		return nil
	}
}

// hammer runs fn from g goroutines for d; it returns the calls made and
// the elapsed time.
func hammer(fn func() error, g int, d time.Duration) (int64, time.Duration, error) {
	var n atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(d)
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := fn(); err != nil {
					failed.Store(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	if err, _ := failed.Load().(error); err != nil {
		return 0, 0, err
	}
	return n.Load(), el, nil
}

const serveToken = "bench-token"

// startServe runs a server.Server with one validated echo tool on a
// loopback listener and returns its base URL.
func startServe(t testing.TB, cache string) string {
	path := filepath.Join(root(t), "testdata/wasm/echo_reactor.wasm")
	src := server.StaticSource{Tools: []server.StaticTool{{
		Manifest: toolManifest("bench.serve", fsRef(path), true, "context-isolated", 5000), Module: readFile(t, path)}}}
	srv, err := server.New(context.Background(), newExecutor(t, cache, 8), src, server.Options{Token: serveToken, MaxConcurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
		_ = srv.Close(context.Background())
	})
	return "http://" + ln.Addr().String()
}

// startFloor is the floor: net/http decoding the frame and answering
// {"v":2,"kind":"result","output":<input>}.
func startFloor(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Input json.RawMessage `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
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
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// httpLoad is one measured stretch of keep-alive POSTs.
type httpLoad struct {
	calls   int64
	elapsed time.Duration
	cpu     time.Duration
	lat     *hist
}

// postLoop posts body from conc goroutines for d, or until limit calls
// are made when limit > 0.
func postLoop(hc *http.Client, url string, body []byte, conc int, d time.Duration, limit int64) (httpLoad, error) {
	var mu sync.Mutex
	h := newHist()
	var n, claimed atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	cpu0, t0 := processCPU(), time.Now()
	end := t0.Add(d)
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for (limit > 0 && claimed.Add(1) <= limit) || (limit <= 0 && time.Now().Before(end)) {
				s := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("kindgi-pack-token", serveToken)
				res, err := hc.Do(req)
				if err != nil {
					failed.Store(err)
					return
				}
				rb, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if res.StatusCode != http.StatusOK || !bytes.Contains(rb, []byte(`"kind":"result"`)) {
					failed.Store(fmt.Errorf("%d %s", res.StatusCode, rb))
					return
				}
				lat := time.Since(s)
				mu.Lock()
				h.add(lat)
				mu.Unlock()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	l := httpLoad{calls: n.Load(), elapsed: time.Since(t0), cpu: processCPU() - cpu0, lat: h}
	if err, _ := failed.Load().(error); err != nil {
		return l, err
	}
	return l, nil
}

// loadEnv selects TestServingLoadChild: the load client of serveVsFloor,
// run as a child process so that this process's CPU is the server's alone.
const loadEnv = "SANDBOXD_BENCH_LOAD"

// TestServingLoadChild is the child: it posts the frame in $SANDBOXD_BENCH_LOAD_BODY
// to $SANDBOXD_BENCH_LOAD from $..._CONC goroutines, warms for 100 ms,
// prints "go", measures for $..._MS ms (or $..._N calls when set) and
// prints "calls elapsedNs p50Ns".
func TestServingLoadChild(t *testing.T) {
	url := os.Getenv(loadEnv)
	if url == "" {
		t.Skip("the load child of serveVsFloor")
	}
	conc, _ := strconv.Atoi(os.Getenv(loadEnv + "_CONC"))
	msec, _ := strconv.Atoi(os.Getenv(loadEnv + "_MS"))
	limit, _ := strconv.ParseInt(os.Getenv(loadEnv+"_N"), 10, 64)
	body := []byte(os.Getenv(loadEnv + "_BODY"))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if _, err := postLoop(hc, url, body, conc, 100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	fmt.Println("go")
	l, err := postLoop(hc, url, body, conc, time.Duration(msec)*time.Millisecond, limit)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%d %d %d\n", l.calls, int64(l.elapsed), int64(l.lat.quantile(0.5)))
}

// childLoad runs the load child against url and returns what it measured
// with this process's CPU time while it measured. With n > 0 the child
// makes n calls instead of calling for d. b, when not nil, has its timer
// running only while the child measures (so that a benchmark's allocs/op
// and profiles cover the measured calls).
func childLoad(t testing.TB, url string, body []byte, conc int, d time.Duration, n int64, b *testing.B) httpLoad {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServingLoadChild$")
	cmd.Env = append(os.Environ(), loadEnv+"="+url, loadEnv+"_CONC="+strconv.Itoa(conc),
		loadEnv+"_MS="+strconv.FormatInt(d.Milliseconds(), 10), loadEnv+"_N="+strconv.FormatInt(n, 10), loadEnv+"_BODY="+string(body))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var l httpLoad
	var cpu0 time.Duration
	for sc.Scan() {
		line := sc.Text()
		if line == "go" {
			if b != nil {
				b.StartTimer()
			}
			cpu0 = processCPU()
			continue
		}
		var el, p50 int64
		if n, _ := fmt.Sscanf(line, "%d %d %d", &l.calls, &el, &p50); n == 3 {
			l.cpu = processCPU() - cpu0
			if b != nil {
				b.StopTimer()
			}
			l.elapsed, l.lat = time.Duration(el), newHist()
			l.lat.add(time.Duration(p50))
		}
	}
	if err := cmd.Wait(); err != nil || l.calls == 0 {
		t.Fatalf("load child: %v: %s", err, stderr.Bytes())
	}
	return l
}

// serveBody is the invoke frame of the serve rows: the 1 KiB echo input.
func serveBody() []byte {
	return []byte(`{"v":2,"kind":"invoke","tool":{"id":"bench.serve"},"input":` + string(payload(1<<10)) + `,"ctx":{"tenantId":"t1","runId":"r1"}}`)
}

func serveVsFloor(t *testing.T, r *report) {
	serve, floor := startServe(t, t.TempDir()), startFloor(t)
	body := serveBody()
	const rounds = 3
	d := span(700 * time.Millisecond)
	r.p("## serve over loopback HTTP vs a net/http floor (goals: CPU per call ≤ 1.5×, calls/s ≥ 0.67× at c=8)")
	r.p("")
	r.p("`server.Server` (the pack protocol's `/v1/invoke`, 1 KiB validated WAT echo, context-isolated) and a minimal net/http JSON echo (decode the frame, encode `{v,kind,output}`) on loopback listeners in this process; the keep-alive load client (c=1, c=8) is a child process, so the CPU per call is the server's alone (this process's getrusage over the measured calls, guest included). %d interleaved rounds of %s per side; p50 is the median of the rounds' medians.", rounds, d)
	r.p("")
	r.p("| c | floor p50 µs | serve p50 µs | p50 ratio | floor calls/s | serve calls/s | calls/s ratio | floor CPU µs/call | serve CPU µs/call | CPU ratio |")
	r.p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, conc := range []int{1, 8} {
		var calls [2]int64
		var el, cpu [2]time.Duration
		var p50 [2][]time.Duration
		for round := 0; round < rounds; round++ {
			for i, u := range []string{floor, serve} {
				l := childLoad(t, u+"/v1/invoke", body, conc, d, 0, nil)
				calls[i] += l.calls
				el[i] += l.elapsed
				cpu[i] += l.cpu
				p50[i] = append(p50[i], l.lat.quantile(0.5))
			}
		}
		cps := func(i int) float64 { return float64(calls[i]) / el[i].Seconds() }
		per := func(i int) time.Duration { return cpu[i] / time.Duration(calls[i]) }
		fp, sp := median(p50[0]), median(p50[1])
		cpuX, cpsX := ratioOf(per(1), per(0)), cps(1)/cps(0)
		cpuV := addGoal(fmt.Sprintf("`serve` over loopback HTTP vs net/http floor, c=%d: server CPU per call", conc),
			fmt.Sprintf("%s (%s vs %s µs)", fmtRatio(cpuX), us(per(1)), us(per(0))), "≤ 1.5×", cpuX <= 1.5)
		cpsV := "(no goal at c=1)"
		if conc == 8 {
			cpsV = addGoal("`serve` over loopback HTTP vs net/http floor, c=8: calls/s", fmt.Sprintf("%.2f× (%.0f vs %.0f)", cpsX, cps(1), cps(0)), "≥ 0.67×", cpsX >= 0.67)
		}
		r.p("| %d | %s | %s | %s | %.0f | %.0f | %.2f× %s | %s | %s | %s %s |", conc, us(fp), us(sp), ratio(sp, fp),
			cps(0), cps(1), cpsX, cpsV, us(per(0)), us(per(1)), ratio(per(1), per(0)), cpuV)
	}
	r.p("")
}

// freshCost measures what a fresh instance adds to a call: each
// context-isolated variant minus the reused (posture none) call, measured
// interleaved.
func freshCost(t *testing.T, r *report) {
	ctx := context.Background()
	cache := t.TempDir()
	in := payload(1 << 10)
	path := filepath.Join(root(t), "testdata/wasm/echo_reactor.wasm")
	call := func(tool *executor.Tool) func() error {
		return func() error { _, err := tool.Invoke(ctx, executor.Request{Input: in}); return err }
	}
	cases := []callCase{
		{"reused (posture none)", call(loadTool(t, newExecutor(t, cache, 4), toolManifest("bench.fresh", fsRef(path), true, "none", 5000)))},
		{"context-isolated, recycled pooled instance", call(loadTool(t, newExecutor(t, cache, 4), toolManifest("bench.fresh", fsRef(path), true, "context-isolated", 5000)))},
		{"context-isolated, never-used pooled instance (recycling off)", call(loadTool(t, newExecutor(t, cache, 4, noRecycle), toolManifest("bench.fresh", fsRef(path), true, "context-isolated", 5000)))},
		{"context-isolated, unpooled (instantiated in the call)", call(loadTool(t, newExecutor(t, cache, 0), toolManifest("bench.fresh", fsRef(path), true, "context-isolated", 5000)))},
	}
	fns := make([]func() error, len(cases))
	for i, c := range cases {
		fns[i] = c.fn
	}
	res, err := interleaved(fns, 20, 6, 2000, span(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.p("## Fresh-instance cost = call − reused call")
	r.p("")
	r.p("1 KiB validated echo (WAT guest), back to back, 6 interleaved rounds of %s per case. The cost of a fresh instance is the p50 of the call minus the p50 of the same call on a reused instance, in this run.", span(100*time.Millisecond))
	r.p("")
	r.p("| case | p50 µs | fresh-instance cost µs | allocs/op |")
	r.p("|---|---:|---:|---:|")
	for i, c := range cases {
		cost := "–"
		if i > 0 {
			cost = us(res[i].p50 - res[0].p50)
		}
		r.p("| %s | %s | %s | %.0f |", c.name, us(res[i].p50), cost, res[i].allocs)
	}
	r.p("")
}

// paced compares back-to-back calls with calls paced by a gap (the pool
// refills between paced calls, not between back-to-back ones).
func paced(t *testing.T, r *report) {
	ctx := context.Background()
	cache := t.TempDir()
	in := payload(1 << 10)
	path := filepath.Join(root(t), "testdata/wasm/echo_reactor.wasm")
	r.p("## Paced vs back-to-back calls")
	r.p("")
	const gap = 2 * time.Millisecond
	r.p("1 KiB validated echo (WAT guest), one caller; paced calls wait %s after each call (the pool refills in the background meanwhile), back-to-back ones do not. %d interleaved rounds.", gap, 4)
	r.p("")
	r.p("| case | back-to-back p50 µs | paced p50 µs | paced / back-to-back |")
	r.p("|---|---:|---:|---:|")
	for _, c := range []struct {
		name string
		opts []func(executor.Config) executor.Config
	}{{"context-isolated, recycling on", nil}, {"context-isolated, never-used instances (recycling off)", []func(executor.Config) executor.Config{noRecycle}}} {
		tool := loadTool(t, newExecutor(t, cache, 4, c.opts...), toolManifest("bench.paced", fsRef(path), true, "context-isolated", 5000))
		h := [2]*hist{newHist(), newHist()}
		for round := 0; round < 4; round++ {
			for mode := 0; mode < 2; mode++ {
				end := time.Now().Add(span(200 * time.Millisecond))
				for j := 0; j < 3 || time.Now().Before(end); j++ {
					t0 := time.Now()
					if _, err := tool.Invoke(ctx, executor.Request{Input: in}); err != nil {
						t.Fatal(err)
					}
					h[mode].add(time.Since(t0))
					if mode == 1 {
						time.Sleep(gap)
					}
				}
			}
		}
		b2b, p := h[0].quantile(0.5), h[1].quantile(0.5)
		r.p("| %s | %s | %s | %s |", c.name, us(b2b), us(p), ratio(p, b2b))
	}
	r.p("")
}

// merge adds o's counts to h.
//
//lint:ignore U1000 unused since 11e24ed moved the load client to a child process; kept for per-worker histograms
func (h *hist) merge(o *hist) {
	for k, n := range o.counts {
		h.counts[k] += n
	}
	h.n += o.n
}
