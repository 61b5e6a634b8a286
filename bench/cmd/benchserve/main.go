// Command benchserve is `make bench-serve`: an external load generator
// (wrk) against `sandboxd serve` (the pack protocol's POST /v1/invoke, a
// 1 KiB validated echo, context-isolated) and against a minimal net/http
// server that decodes and encodes the same frame (this program run as
// `benchserve floor`, its own process), on one machine, in interleaved
// rounds (floor, serve, floor, serve, …), and prints a markdown table of
// calls/s, p50 and p99 at each concurrency with the ratios and the goals
// of issue 26.
//
//	benchserve -sandboxd bin/sandboxd -module testdata/wasm/echo_reactor.wasm
//
// With -cpuprofile FILE, the serve side is instead a server.Server in this
// process (configured as `sandboxd serve` configures it, process events
// to a file) and FILE is its CPU profile over the measured rounds; the
// figures of that run are not the headline ones (wrk's load lands on the
// profiled process's machine either way, but the server shares a process
// with the profiler).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

const token = "bench-token"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := floor(); err != nil {
			fmt.Fprintln(os.Stderr, "benchserve floor:", err)
			os.Exit(1)
		}
		return
	}
	var o opts
	flag.StringVar(&o.sandboxd, "sandboxd", "bin/sandboxd", "the sandboxd binary to serve with")
	flag.StringVar(&o.module, "module", "testdata/wasm/echo_reactor.wasm", "the echo tool's module (reads {\"data\":string}, answers its input)")
	flag.StringVar(&o.wrk, "wrk", "wrk", "the wrk binary")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads (-t)")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per concurrency (each round: floor, then serve)")
	flag.DurationVar(&o.dur, "d", 3*time.Second, "wrk duration of one side of one round (whole seconds)")
	flag.StringVar(&o.conc, "c", "8,64", "concurrencies (wrk connections), comma separated")
	flag.StringVar(&o.serveFlags, "serve-flags", "", "extra `sandboxd serve` flags (space separated), e.g. --max-concurrency 64")
	flag.IntVar(&o.tenants, "tenants", 8, "calls cycle through this many ctx.tenantIds (t1…tN); with 1, c=64 exceeds serve's default per-tenant admission (8 running + 16 waiting) and gets 503 tenant-queue-full by design")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "serve in-process and write its CPU profile here (profiling run, not the headline)")
	flag.StringVar(&o.memprofile, "memprofile", "", "with -cpuprofile: also write the allocation profile (alloc_space/alloc_objects) here")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchserve:", err)
		os.Exit(1)
	}
}

type opts struct {
	sandboxd, module, wrk, conc, serveFlags, cpuprofile, memprofile string
	threads, rounds, tenants                                        int
	dur                                                             time.Duration
}

// frame is the invoke frame of tenant tN: the 1 KiB echo input.
func frame(tenant int) string {
	return `{"v":2,"kind":"invoke","tool":{"id":"bench.serve"},"input":{"data":"` + strings.Repeat("x", 1<<10) +
		`"},"ctx":{"tenantId":"t` + strconv.Itoa(tenant) + `","runId":"r1"}}`
}

// manifest is the served tool: the validated echo, context-isolated.
func manifest(module string) string {
	schema := `{"type":"object","properties":{"data":{"type":"string"}},"required":["data"],"additionalProperties":false}`
	return fmt.Sprintf(`{"id":"bench.serve","description":"bench","version":"1.0.0","sandbox":"context-isolated",
"input":%s,"output":%s,"codeArtifactRef":{"kind":"filesystem","modulePath":%q},"limits":{"memMB":64,"cpuMs":5000}}`,
		schema, schema, module)
}

// proc is a server process (or, profiling, this process) under load.
type proc struct {
	url string
	pid int
	cmd *exec.Cmd
}

// cpu is the process's user+system CPU time so far.
func (p proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command: state is field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

func (p proc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func run(o opts) error {
	var concs []int
	for _, s := range strings.Split(o.conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			return fmt.Errorf("-c %q: want positive integers", o.conc)
		}
		concs = append(concs, c)
	}
	if _, err := exec.LookPath(o.wrk); err != nil {
		return fmt.Errorf("%s is not installed (Debian: apt-get install wrk): %w", o.wrk, err)
	}
	module, err := filepath.Abs(o.module)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchserve")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "invoke.lua")
	if o.tenants < 1 {
		return fmt.Errorf("-tenants %d: want at least 1", o.tenants)
	}
	var bodies []string
	for i := 1; i <= o.tenants; i++ {
		bodies = append(bodies, frame(i))
	}
	if err := os.WriteFile(script, []byte(luaScript(bodies)), 0o644); err != nil {
		return err
	}

	fl, err := startFloor()
	if err != nil {
		return err
	}
	defer fl.stop()
	var sv proc
	var stopProfile func() error
	if o.cpuprofile != "" {
		var closeSrv func()
		sv, closeSrv, err = startInProcess(module, dir)
		if err != nil {
			return err
		}
		defer closeSrv()
	} else {
		sv, err = startServe(o, module, dir)
		if err != nil {
			return err
		}
		defer sv.stop()
	}
	for _, p := range []proc{fl, sv} {
		if err := check(p.url, bodies[0]); err != nil {
			return err
		}
	}
	// Warm both (connections, pools, JIT-less caches) before measuring.
	for _, p := range []proc{fl, sv} {
		if _, err := wrk(o, script, p, concs[len(concs)-1], time.Second); err != nil {
			return err
		}
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		stopProfile = func() error { pprof.StopCPUProfile(); return f.Close() }
	}
	load0 := loadavg()
	t0 := time.Now()
	res := make(map[int][2][]round)
	for _, c := range concs {
		var rs [2][]round
		for i := 0; i < o.rounds; i++ {
			for side, p := range []proc{fl, sv} {
				r, err := wrk(o, script, p, c, o.dur)
				if err != nil {
					return err
				}
				rs[side] = append(rs[side], r)
			}
		}
		res[c] = rs
	}
	if stopProfile != nil {
		if err := stopProfile(); err != nil {
			return err
		}
		if o.memprofile != "" {
			f, err := os.Create(o.memprofile)
			if err != nil {
				return err
			}
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
	printTable(o, concs, res, load0, loadavg(), time.Since(t0))
	return nil
}

// round is what one wrk run measured.
type round struct {
	calls      int64
	elapsed    time.Duration
	p50, p99   time.Duration
	errs, bad  int64 // socket errors; answers not 200 + "kind":"result"
	cpuPerCall time.Duration
	serverCPU  time.Duration
}

func wrk(o opts, script string, p proc, conc int, d time.Duration) (round, error) {
	secs := int64(d.Round(time.Second) / time.Second) // wrk takes whole seconds
	if secs < 1 {
		secs = 1
	}
	t := o.threads
	if t > conc {
		t = conc
	}
	cmd := exec.Command(o.wrk, "-t", strconv.Itoa(t), "-c", strconv.Itoa(conc), "-d", fmt.Sprintf("%ds", secs),
		"--timeout", "10s", "-s", script, p.url+"/v1/invoke")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cpu0 := p.cpu()
	out, err := cmd.Output()
	cpu := p.cpu() - cpu0
	if err != nil {
		return round{}, fmt.Errorf("wrk: %v: %s%s", err, out, stderr.Bytes())
	}
	var r round
	var got int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var k string
		var v int64
		if n, _ := fmt.Sscanf(sc.Text(), "BENCH %s %d", &k, &v); n != 2 {
			continue
		}
		got++
		switch k {
		case "requests":
			r.calls = v
		case "duration_us":
			r.elapsed = time.Duration(v) * time.Microsecond
		case "p50_us":
			r.p50 = time.Duration(v) * time.Microsecond
		case "p99_us":
			r.p99 = time.Duration(v) * time.Microsecond
		case "errors":
			r.errs = v
		case "bad":
			r.bad = v
		}
	}
	if got != 6 || r.calls == 0 {
		return round{}, fmt.Errorf("wrk printed no figures: %s%s", out, stderr.Bytes())
	}
	r.serverCPU = cpu
	r.cpuPerCall = cpu / time.Duration(r.calls)
	return r, nil
}

// luaScript posts the bodies in turn (each a request formatted once)
// with the token and counts, per thread, answers that are not 200 with a
// result frame; done prints the figures.
func luaScript(bodies []string) string {
	var b strings.Builder
	b.WriteString("local bodies = {\n")
	for _, body := range bodies {
		b.WriteString("[==[" + body + "]==],\n")
	}
	b.WriteString("}\n")
	return b.String() + `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["kindgi-pack-token"] = "` + token + `"
local threads = {}
local reqs = {}
local i = 0
function setup(thread) table.insert(threads, thread) end
function init(args)
  bad = 0
  for k, body in ipairs(bodies) do reqs[k] = wrk.format("POST", nil, nil, body) end
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"kind":"result"', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + t:get("bad") end
  local e = summary.errors
  io.write(string.format("BENCH requests %d\nBENCH duration_us %d\nBENCH p50_us %d\nBENCH p99_us %d\nBENCH errors %d\nBENCH bad %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, n))
end
`
}

// check posts one frame and wants a result echoing the input.
func check(url, body string) error {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/invoke", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("kindgi-pack-token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var f struct {
		Kind   string          `json:"kind"`
		Output json.RawMessage `json:"output"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &f) != nil || f.Kind != "result" || len(f.Output) < 1<<10 {
		return fmt.Errorf("%s: not a result echoing the input: %d %.300s", url, res.StatusCode, b)
	}
	return nil
}

// startServe runs `sandboxd serve --tools DIR --dev` on a loopback port;
// its process events (one call record per invocation) go to a file, as a
// log collector would take them.
func startServe(o opts, module, dir string) (proc, error) {
	tools := filepath.Join(dir, "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		return proc{}, err
	}
	if err := os.WriteFile(filepath.Join(tools, "tool.json"), []byte(manifest(module)), 0o644); err != nil {
		return proc{}, err
	}
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return proc{}, err
	}
	defer logf.Close()
	args := append([]string{"serve", "--tools", tools, "--dev", "--addr", "127.0.0.1:0"}, strings.Fields(o.serveFlags)...)
	cmd := exec.Command(o.sandboxd, args...)
	cmd.Env = append(os.Environ(), "KINDGI_PACK_SERVICE_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return proc{}, err
	}
	p := proc{pid: cmd.Process.Pid, cmd: cmd}
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		for _, line := range bytes.Split(b, []byte("\n")) {
			var ev struct {
				Kind string `json:"kind"`
				Port int    `json:"port"`
			}
			if json.Unmarshal(line, &ev) == nil && ev.Kind == "listening" {
				p.url = fmt.Sprintf("http://127.0.0.1:%d", ev.Port)
				return p, nil
			}
			if json.Unmarshal(line, &ev) == nil && (ev.Kind == "boot-failed" || ev.Kind == "config-invalid") {
				p.stop()
				return proc{}, fmt.Errorf("sandboxd serve: %s", line)
			}
		}
	}
	p.stop()
	b, _ := os.ReadFile(logPath)
	return proc{}, fmt.Errorf("sandboxd serve did not report listening: %s", b)
}

// startInProcess is the profiling run's serve side: a server.Server in
// this process, configured as `sandboxd serve` configures it.
func startInProcess(module, dir string) (proc, func(), error) {
	ctx := context.Background()
	ex, err := executor.New(ctx, executor.NewConfig().WithDevMode(true).WithCacheDir(filepath.Join(dir, "cache")).WithGuestOutput(io.Discard, io.Discard))
	if err != nil {
		return proc{}, nil, err
	}
	mod, err := os.ReadFile(module)
	if err != nil {
		return proc{}, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return proc{}, nil, err
	}
	src := server.StaticSource{Tools: []server.StaticTool{{Manifest: []byte(manifest(module)), Module: mod}}}
	srv, err := server.New(ctx, ex, src, server.Options{Token: token, Log: server.NewLogger(logf)})
	if err != nil {
		return proc{}, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return proc{}, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	return proc{url: "http://" + ln.Addr().String(), pid: os.Getpid()}, func() {
		cancel()
		<-done
		_ = srv.Close(ctx)
		_ = ex.Close(ctx)
		_ = logf.Close()
	}, nil
}

// startFloor runs this program as `benchserve floor` and reads its address.
func startFloor() (proc, error) {
	self, err := os.Executable()
	if err != nil {
		return proc{}, err
	}
	cmd := exec.Command(self, "floor")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return proc{}, err
	}
	if err := cmd.Start(); err != nil {
		return proc{}, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return proc{}, fmt.Errorf("floor: %v", err)
	}
	return proc{url: "http://" + strings.TrimSpace(line), pid: cmd.Process.Pid, cmd: cmd}, nil
}

// floor is the minimal net/http pack service: it checks the token,
// decodes the whole invoke frame with encoding/json and answers
// {"v":2,"kind":"result","output":<input>}.
func floor() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	type invoke struct {
		V    int    `json:"v"`
		Kind string `json:"kind"`
		Tool struct {
			ID string `json:"id"`
		} `json:"tool"`
		Input json.RawMessage `json:"input"`
		Ctx   struct {
			TenantID string `json:"tenantId"`
			RunID    string `json:"runId"`
		} `json:"ctx"`
	}
	type answer struct {
		V      int             `json:"v"`
		Kind   string          `json:"kind"`
		Output json.RawMessage `json:"output"`
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("kindgi-pack-token") != token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var f invoke
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil || f.V != 2 || f.Kind != "invoke" {
			http.Error(w, "bad frame", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer{2, "result", f.Input})
	})}
	err = hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func printTable(o opts, concs []int, res map[int][2][]round, load0, load1 string, took time.Duration) {
	what := "`sandboxd serve` (" + o.sandboxd + ")"
	if o.cpuprofile != "" {
		what = "server.Server in the profiling process (profile: " + o.cpuprofile + "; not the headline figures)"
	}
	fmt.Printf("## serve under wrk vs a net/http floor\n\n")
	fmt.Printf("%s, POST /v1/invoke with the token, 1 KiB validated echo (context-isolated) vs `benchserve floor` (net/http + encoding/json: decode the frame, encode {v,kind,output}), separate processes, loopback. wrk -t%d, calls cycling through %d tenants, %d interleaved rounds (floor, serve) of %s per concurrency; calls/s over all rounds, p50/p99 the median of the rounds'; server CPU/call from /proc/PID/stat. Load average %s before, %s after (%s).\n\n",
		what, o.threads, o.tenants, o.rounds, o.dur, load0, load1, took.Round(time.Second))
	fmt.Printf("| c | floor calls/s | serve calls/s | ratio | floor p50 µs | serve p50 µs | ratio | floor p99 µs | serve p99 µs | ratio | floor CPU µs/call | serve CPU µs/call | errors floor / serve | goals |\n")
	fmt.Printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	allMet := true
	for _, c := range concs {
		rs := res[c]
		var calls [2]int64
		var el, cpu [2]time.Duration
		var p50, p99 [2][]time.Duration
		var errs [2]int64
		for side := 0; side < 2; side++ {
			for _, r := range rs[side] {
				calls[side] += r.calls
				el[side] += r.elapsed
				cpu[side] += r.serverCPU
				p50[side] = append(p50[side], r.p50)
				p99[side] = append(p99[side], r.p99)
				errs[side] += r.errs + r.bad
			}
		}
		cps := func(s int) float64 { return float64(calls[s]) / el[s].Seconds() }
		per := func(s int) time.Duration { return cpu[s] / time.Duration(calls[s]) }
		cpsX := cps(1) / cps(0)
		p50X := float64(median(p50[1])) / float64(median(p50[0]))
		p99X := float64(median(p99[1])) / float64(median(p99[0]))
		var goals []string
		switch c {
		case 8:
			goals = append(goals, "calls/s ≥ 0.8×: "+verdict(cpsX >= 0.8), "p50 ≤ 1.5×: "+verdict(p50X <= 1.5))
			allMet = allMet && cpsX >= 0.8 && p50X <= 1.5
		case 64:
			goals = append(goals, "no error: "+verdict(errs[1] == 0), "p99 ≤ 3×: "+verdict(p99X <= 3))
			allMet = allMet && errs[1] == 0 && p99X <= 3
		default:
			goals = append(goals, "(no goal at this c)")
		}
		fmt.Printf("| %d | %.0f | %.0f | %.2f× | %s | %s | %.2f× | %s | %s | %.2f× | %s | %s | %d / %d | %s |\n", c,
			cps(0), cps(1), cpsX, us(median(p50[0])), us(median(p50[1])), p50X, us(median(p99[0])), us(median(p99[1])), p99X,
			us(per(0)), us(per(1)), errs[0], errs[1], strings.Join(goals, "; "))
	}
	fmt.Println()
	if allMet {
		fmt.Println("serve goals: met")
	} else {
		fmt.Println("serve goals: not met")
	}
}
