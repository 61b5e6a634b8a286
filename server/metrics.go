package server

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// metrics is sandboxd's Prometheus registry. The per-call series are
// written in the text exposition format (version 0.0.4) here; the standard
// process_*, go_* and sandboxd_build_info series come from client_golang's
// collectors and its encoder (std), appended to the same scrape
// (docs/RATIONALE.md "Metrics": why the per-call series stay here).
//
// What every call records (call, admitted, acquired) touches no lock shared
// by all calls: a tool's series are found in a sync.Map and updated with
// atomics; mu guards the rarer refusals and egress counts, and the
// creation of a tool's or outcome's series.
type metrics struct {
	tools sync.Map // tool -> *toolSeries
	std   *prometheus.Registry

	mu       sync.Mutex
	rejected map[string]float64    // reason
	admRef   map[string]float64    // admission refusals, by reason
	egress   map[[2]string]float64 // tool, decision
}

// toolSeries are one tool's per-call series.
type toolSeries struct {
	outcomes sync.Map // outcome -> *atomic.Uint64 (invocations)
	duration *histogram
	ran      atomic.Bool // a guest ran: cpuMs, cpu and peakMem exist
	cpuMs    atomicFloat
	cpu      *histogram // seconds per call
	peakMem  *histogram
	wait     *histogram // admission wait of admitted calls, seconds
	acquired [len(acquisitionPaths)]atomic.Uint64
	limits   [len(limitLabels)]atomic.Uint64 // limits-exceeded calls, by limit
}

// limitLabels are the label values of sandboxd_limits_exceeded_total (the
// last: a limit not named here).
var limitLabels = [...]toolerr.Limit{toolerr.LimitMemMB, toolerr.LimitCPUMs, toolerr.LimitFuel, "other"}

// acquisitionPaths are the label values of sandboxd_instance_acquisitions_total.
var acquisitionPaths = [...]executor.Acquisition{executor.AcquiredPooled, executor.AcquiredRecycled, executor.AcquiredWarm, executor.AcquiredImage, executor.AcquiredInstantiated}

// atomicFloat is a float64 sum updated without a lock.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) add(v float64) {
	for {
		old := f.bits.Load()
		if f.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (f *atomicFloat) load() float64 { return math.Float64frombits(f.bits.Load()) }

// durationBuckets are the latency buckets in seconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// cpuBuckets are the guest CPU-time buckets in seconds.
var cpuBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// waitBuckets are the admission-wait buckets in seconds (most calls wait
// for nothing: the first bucket).
var waitBuckets = []float64{0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// memBuckets are the peak-memory buckets in MiB.
var memBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}

// histogram counts each observation in the first bucket whose bound holds
// it (the last slot: above every bound); write makes them cumulative, so a
// scrape's buckets and count always agree.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // len(bounds)+1
	sum    atomicFloat
}

func newHistogram(b []float64) *histogram {
	return &histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}
}

// count is the observations so far.
func (h *histogram) count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.add(v)
}

func newMetrics(version string) *metrics {
	return &metrics{
		std:      standardRegistry(version),
		rejected: map[string]float64{}, admRef: map[string]float64{},
		egress: map[[2]string]float64{},
	}
}

// standardRegistry holds the series every Prometheus user expects: the Go
// runtime's (go_*), the process's (process_*: CPU, memory, open fds, start
// time) and sandboxd_build_info.
func standardRegistry(version string) *prometheus.Registry {
	r := prometheus.NewRegistry()
	revision, goVersion := "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				revision = st.Value
			}
		}
	}
	if version == "" {
		version = "unknown"
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sandboxd_build_info", Help: "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	info.Set(1)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info)
	return r
}

// series returns tool's series, creating them on its first call.
func (m *metrics) series(tool string) *toolSeries {
	if ts, ok := m.tools.Load(tool); ok {
		return ts.(*toolSeries)
	}
	ts, _ := m.tools.LoadOrStore(tool, &toolSeries{duration: newHistogram(durationBuckets), cpu: newHistogram(cpuBuckets),
		peakMem: newHistogram(memBuckets), wait: newHistogram(waitBuckets)})
	return ts.(*toolSeries)
}

// egressAttempts counts a call's HTTP requests by decision.
func (m *metrics) egressAttempts(tool string, attempts []egress.Attempt) {
	if len(attempts) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range attempts {
		d := "denied"
		if a.Allowed {
			d = "allowed"
		}
		m.egress[[2]string{tool, d}]++
	}
}

// call records one finished invocation. ran is false when no guest ran.
func (m *metrics) call(tool, outcome string, seconds float64, ran bool, cpuMs, peakMB float64) {
	ts := m.series(tool)
	n, ok := ts.outcomes.Load(outcome)
	if !ok {
		n, _ = ts.outcomes.LoadOrStore(outcome, new(atomic.Uint64))
	}
	n.(*atomic.Uint64).Add(1)
	ts.duration.observe(seconds)
	if ran {
		ts.cpuMs.add(cpuMs)
		ts.cpu.observe(cpuMs / 1000)
		ts.peakMem.observe(peakMB)
		ts.ran.Store(true)
	}
}

// limitExceeded counts a limits-exceeded call of tool by its limit.
func (m *metrics) limitExceeded(tool string, l toolerr.Limit) {
	i := len(limitLabels) - 1
	for j, x := range limitLabels[:i] {
		if x == l {
			i = j
		}
	}
	m.series(tool).limits[i].Add(1)
}

// admitted records the admission wait of a call that got its slots.
func (m *metrics) admitted(tool string, seconds float64) {
	m.series(tool).wait.observe(seconds)
}

// acquired counts how a call got its instance ("" : none, not counted).
func (m *metrics) acquired(tool string, a executor.Acquisition) {
	for i, p := range acquisitionPaths {
		if p == a {
			m.series(tool).acquired[i].Add(1)
			return
		}
	}
}

func (m *metrics) reject(reason string) {
	m.mu.Lock()
	m.rejected[reason]++
	m.mu.Unlock()
}

// refuseAdmission counts a refusal of admission (also a 503 before
// running). The reason is a Refusal, never a caller's id.
func (m *metrics) refuseAdmission(reason string) {
	m.mu.Lock()
	m.rejected[reason]++
	m.admRef[reason]++
	m.mu.Unlock()
}

// gauges are read at scrape time.
type gauges struct {
	inflight, queued, capacity, queueCap int
	tenants, tenantCap, tenantQueueCap   int
	tenantsWaiting, longestTenantQueue   int
	ready, draining                      bool
	tools                                int
	toolInflight                         map[string]int
	poolReady, poolCap                   map[string]int   // pooled tools only
	poolRecycled                         map[string]int64 // pooled tools only
	imageInstances                       map[string]int64 // tools with an instance image only
}

func (m *metrics) write(w io.Writer, g gauges) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	head := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	// A snapshot of the per-call series (each read atomically).
	invocations := map[[2]string]float64{}
	duration, peakMem := map[string]*histogram{}, map[string]*histogram{}
	cpu, wait := map[string]*histogram{}, map[string]*histogram{}
	acquired, limitsHit := map[[2]string]uint64{}, map[[2]string]uint64{}
	cpuMs := map[string]float64{}
	m.tools.Range(func(k, v any) bool {
		tool, ts := k.(string), v.(*toolSeries)
		ts.outcomes.Range(func(o, n any) bool {
			invocations[[2]string{tool, o.(string)}] = float64(n.(*atomic.Uint64).Load())
			return true
		})
		duration[tool] = ts.duration
		if ts.wait.count() > 0 {
			wait[tool] = ts.wait
		}
		if ts.ran.Load() {
			cpuMs[tool], peakMem[tool], cpu[tool] = ts.cpuMs.load(), ts.peakMem, ts.cpu
		}
		for i, p := range acquisitionPaths {
			if n := ts.acquired[i].Load(); n > 0 {
				acquired[[2]string{tool, string(p)}] = n
			}
		}
		for i, l := range limitLabels {
			if n := ts.limits[i].Load(); n > 0 {
				limitsHit[[2]string{tool, string(l)}] = n
			}
		}
		return true
	})
	head("sandboxd_invocations_total", "counter", "Tool invocations answered, by tool and outcome (ok or the wire error code).")
	keys := make([][2]string, 0, len(invocations))
	for k := range invocations {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "sandboxd_invocations_total{tool=%s,outcome=%s} %s\n", label(k[0]), label(k[1]), num(invocations[k]))
	}
	writeHists(&b, "sandboxd_call_duration_seconds", "Wall time from request to answer, by tool, in seconds.", duration)
	writeHists(&b, "sandboxd_invocation_duration_seconds", "Wall time from request to answer, by tool (the same as sandboxd_call_duration_seconds; kept for existing dashboards).", duration)
	writeHists(&b, "sandboxd_call_cpu_seconds", "Guest CPU time per call, by tool, in seconds (calls whose guest ran).", cpu)
	writeHists(&b, "sandboxd_admission_wait_seconds", "Time an admitted call waited for its global, tool and tenant slots, by tool, in seconds.", wait)
	head("sandboxd_instance_acquisitions_total", "counter", "Calls by how they got their instance: pooled (pre-warmed, never used), recycled (reset after an earlier call), warm (posture none, kept from a call with the same needs), image (made on the call's path from the instance image), instantiated (made in full on the call's path).")
	akeys := make([][2]string, 0, len(acquired))
	for k := range acquired {
		akeys = append(akeys, k)
	}
	sort.Slice(akeys, func(i, j int) bool {
		if akeys[i][0] != akeys[j][0] {
			return akeys[i][0] < akeys[j][0]
		}
		return akeys[i][1] < akeys[j][1]
	})
	for _, k := range akeys {
		fmt.Fprintf(&b, "sandboxd_instance_acquisitions_total{tool=%s,path=%s} %d\n", label(k[0]), label(k[1]), acquired[k])
	}
	head("sandboxd_limits_exceeded_total", "counter", "Calls failed limits-exceeded (handler-throw on the wire), by tool and limit: memMB, cpuMs, fuel, other.")
	for _, k := range sortedPairs(limitsHit) {
		fmt.Fprintf(&b, "sandboxd_limits_exceeded_total{tool=%s,limit=%s} %d\n", label(k[0]), label(k[1]), limitsHit[k])
	}
	head("sandboxd_guest_cpu_ms_total", "counter", "Guest CPU time consumed, by tool, in milliseconds.")
	for _, t := range sortedKeys(cpuMs) {
		fmt.Fprintf(&b, "sandboxd_guest_cpu_ms_total{tool=%s} %s\n", label(t), num(cpuMs[t]))
	}
	writeHists(&b, "sandboxd_guest_peak_memory_mb", "Peak guest memory per call (linear memory plus host buffers), by tool, in MiB.", peakMem)
	head("sandboxd_egress_requests_total", "counter", "Guest HTTP requests (each redirect hop counts), by tool and policy decision (allowed or denied).")
	ekeys := make([][2]string, 0, len(m.egress))
	for k := range m.egress {
		ekeys = append(ekeys, k)
	}
	sort.Slice(ekeys, func(i, j int) bool {
		if ekeys[i][0] != ekeys[j][0] {
			return ekeys[i][0] < ekeys[j][0]
		}
		return ekeys[i][1] < ekeys[j][1]
	})
	for _, k := range ekeys {
		fmt.Fprintf(&b, "sandboxd_egress_requests_total{tool=%s,decision=%s} %s\n", label(k[0]), label(k[1]), num(m.egress[k]))
	}
	head("sandboxd_rejected_total", "counter", "Calls refused with 503 before running, by reason.")
	for _, r := range sortedKeys(m.rejected) {
		fmt.Fprintf(&b, "sandboxd_rejected_total{reason=%s} %s\n", label(r), num(m.rejected[r]))
	}
	head("sandboxd_admission_refused_total", "counter", "Calls refused by admission, by reason: over-capacity (the queue is full), tenant-queue-full, tenant-cpu-budget.")
	for _, r := range []string{string(RefusedOverCapacity), string(RefusedTenantQueue), string(RefusedTenantCPU)} {
		fmt.Fprintf(&b, "sandboxd_admission_refused_total{reason=%s} %s\n", label(r), num(m.admRef[r]))
	}
	gauge := func(name, help string, v int) {
		head(name, "gauge", help)
		fmt.Fprintf(&b, "%s %d\n", name, v)
	}
	gauge("sandboxd_inflight_calls", "Calls holding a concurrency slot.", g.inflight)
	gauge("sandboxd_queue_depth", "Calls waiting for a concurrency slot.", g.queued)
	gauge("sandboxd_concurrency_limit", "The global concurrency cap.", g.capacity)
	gauge("sandboxd_queue_limit", "The bounded queue's capacity.", g.queueCap)
	gauge("sandboxd_admission_tenants", "Tenants with calls running or waiting.", g.tenants)
	gauge("sandboxd_admission_tenants_waiting", "Tenants with calls in the fair queue (its round-robin ring).", g.tenantsWaiting)
	gauge("sandboxd_admission_tenant_queue_depth_max", "Calls waiting in the longest tenant queue (bounded by sandboxd_tenant_queue_limit).", g.longestTenantQueue)
	gauge("sandboxd_tenant_concurrency_limit", "Calls one tenant may run at once.", g.tenantCap)
	gauge("sandboxd_tenant_queue_limit", "Calls one tenant may have waiting.", g.tenantQueueCap)
	gauge("sandboxd_tools_loaded", "Tools in the serving catalog.", g.tools)
	gauge("sandboxd_ready", "1 when /readyz answers ready.", b2i(g.ready))
	gauge("sandboxd_draining", "1 while draining after SIGTERM.", b2i(g.draining))
	head("sandboxd_tool_inflight_calls", "gauge", "Calls running per tool (bounded by the per-tool cap).")
	for _, t := range sortedKeys(g.toolInflight) {
		fmt.Fprintf(&b, "sandboxd_tool_inflight_calls{tool=%s} %d\n", label(t), g.toolInflight[t])
	}
	head("sandboxd_pool_ready_instances", "gauge", "Pre-warmed instances ready per pooled tool: never used, or reset to their state after initialisation (recycled).")
	for _, t := range sortedKeys(g.poolReady) {
		fmt.Fprintf(&b, "sandboxd_pool_ready_instances{tool=%s} %d\n", label(t), g.poolReady[t])
	}
	head("sandboxd_pool_target_instances", "gauge", "Pre-warmed instances each pooled tool aims to keep now (grows under load, shrinks when idle).")
	for _, t := range sortedKeys(g.poolCap) {
		fmt.Fprintf(&b, "sandboxd_pool_target_instances{tool=%s} %d\n", label(t), g.poolCap[t])
	}
	head("sandboxd_pool_recycled_calls_total", "counter", "Calls served by a recycled instance (context-isolated tools whose module can be reset).")
	for _, t := range sortedKeys(g.poolRecycled) {
		fmt.Fprintf(&b, "sandboxd_pool_recycled_calls_total{tool=%s} %d\n", label(t), g.poolRecycled[t])
	}
	head("sandboxd_image_instances_total", "counter", "Instances loaded from their tool's instance image instead of running _initialize (context-isolated and strict tools whose module can be reset).")
	for _, t := range sortedKeys(g.imageInstances) {
		fmt.Fprintf(&b, "sandboxd_image_instances_total{tool=%s} %d\n", label(t), g.imageInstances[t])
	}
	_, _ = io.WriteString(w, b.String())
	m.writeStandard(w)
}

// writeStandard appends the standard series (client_golang's gatherer and
// text encoder).
func (m *metrics) writeStandard(w io.Writer) {
	mfs, err := m.std.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		_ = enc.Encode(mf)
	}
}

func writeHists(b *strings.Builder, name, help string, hs map[string]*histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for _, t := range sortedKeys(hs) {
		h := hs[t]
		var cum uint64
		for i, bound := range h.bounds {
			cum += h.counts[i].Load()
			fmt.Fprintf(b, "%s_bucket{tool=%s,le=\"%s\"} %d\n", name, label(t), num(bound), cum)
		}
		cum += h.counts[len(h.bounds)].Load()
		fmt.Fprintf(b, "%s_bucket{tool=%s,le=\"+Inf\"} %d\n", name, label(t), cum)
		fmt.Fprintf(b, "%s_sum{tool=%s} %s\n", name, label(t), num(h.sum.load()))
		fmt.Fprintf(b, "%s_count{tool=%s} %d\n", name, label(t), cum)
	}
}

func sortedPairs[V any](m map[[2]string]V) [][2]string {
	out := make([][2]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// label quotes a label value per the exposition format.
func label(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}

func num(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%g", f)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
