package server

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/egress"
)

// metrics is sandboxd's Prometheus registry, written in the text
// exposition format (version 0.0.4) by hand: a handful of counters, gauges
// and histograms does not justify client_golang and its dependency tree.
type metrics struct {
	mu          sync.Mutex
	invocations map[[2]string]float64 // tool, outcome
	duration    map[string]*histogram // tool
	cpuMs       map[string]float64    // tool
	peakMem     map[string]*histogram // tool
	rejected    map[string]float64    // reason
	egress      map[[2]string]float64 // tool, decision
}

// durationBuckets are the latency buckets in seconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// memBuckets are the peak-memory buckets in MiB.
var memBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}

type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
	count  uint64
}

func newHistogram(b []float64) *histogram {
	return &histogram{bounds: b, counts: make([]uint64, len(b))}
}

func (h *histogram) observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.count++
}

func newMetrics() *metrics {
	return &metrics{
		invocations: map[[2]string]float64{},
		duration:    map[string]*histogram{},
		cpuMs:       map[string]float64{},
		peakMem:     map[string]*histogram{},
		rejected:    map[string]float64{},
		egress:      map[[2]string]float64{},
	}
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
	m.mu.Lock()
	defer m.mu.Unlock()
	m.invocations[[2]string{tool, outcome}]++
	h := m.duration[tool]
	if h == nil {
		h = newHistogram(durationBuckets)
		m.duration[tool] = h
	}
	h.observe(seconds)
	if ran {
		m.cpuMs[tool] += cpuMs
		p := m.peakMem[tool]
		if p == nil {
			p = newHistogram(memBuckets)
			m.peakMem[tool] = p
		}
		p.observe(peakMB)
	}
}

func (m *metrics) reject(reason string) {
	m.mu.Lock()
	m.rejected[reason]++
	m.mu.Unlock()
}

// gauges are read at scrape time.
type gauges struct {
	inflight, queued, capacity, queueCap int
	ready, draining                      bool
	tools                                int
	toolInflight                         map[string]int
	poolReady, poolCap                   map[string]int   // pooled tools only
	poolRecycled                         map[string]int64 // pooled tools only
}

func (m *metrics) write(w io.Writer, g gauges) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	head := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	head("sandboxd_invocations_total", "counter", "Tool invocations answered, by tool and outcome (ok or the wire error code).")
	keys := make([][2]string, 0, len(m.invocations))
	for k := range m.invocations {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "sandboxd_invocations_total{tool=%s,outcome=%s} %s\n", label(k[0]), label(k[1]), num(m.invocations[k]))
	}
	writeHists(&b, "sandboxd_invocation_duration_seconds", "Wall time from request to answer, by tool.", m.duration)
	head("sandboxd_guest_cpu_ms_total", "counter", "Guest CPU time consumed, by tool, in milliseconds.")
	for _, t := range sortedKeys(m.cpuMs) {
		fmt.Fprintf(&b, "sandboxd_guest_cpu_ms_total{tool=%s} %s\n", label(t), num(m.cpuMs[t]))
	}
	writeHists(&b, "sandboxd_guest_peak_memory_mb", "Peak guest memory per call (linear memory plus host buffers), by tool, in MiB.", m.peakMem)
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
	gauge := func(name, help string, v int) {
		head(name, "gauge", help)
		fmt.Fprintf(&b, "%s %d\n", name, v)
	}
	gauge("sandboxd_inflight_calls", "Calls holding a concurrency slot.", g.inflight)
	gauge("sandboxd_queue_depth", "Calls waiting for a concurrency slot.", g.queued)
	gauge("sandboxd_concurrency_limit", "The global concurrency cap.", g.capacity)
	gauge("sandboxd_queue_limit", "The bounded queue's capacity.", g.queueCap)
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
	_, _ = io.WriteString(w, b.String())
}

func writeHists(b *strings.Builder, name, help string, hs map[string]*histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for _, t := range sortedKeys(hs) {
		h := hs[t]
		for i, bound := range h.bounds {
			fmt.Fprintf(b, "%s_bucket{tool=%s,le=\"%s\"} %d\n", name, label(t), num(bound), h.counts[i])
		}
		fmt.Fprintf(b, "%s_bucket{tool=%s,le=\"+Inf\"} %d\n", name, label(t), h.count)
		fmt.Fprintf(b, "%s_sum{tool=%s} %s\n", name, label(t), num(h.sum))
		fmt.Fprintf(b, "%s_count{tool=%s} %d\n", name, label(t), h.count)
	}
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
