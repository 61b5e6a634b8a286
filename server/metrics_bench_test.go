package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/executor"
)

// BenchmarkCallMetrics is what one served call records in metrics: the
// hand-written series (an outcome counter, the duration, CPU, memory and
// admission-wait histograms, the acquisition count) beside the same series
// as client_golang vectors labelled by tool, at GOMAXPROCS goroutines.
//
//	go test -run '^$' -bench CallMetrics -benchmem ./server
func BenchmarkCallMetrics(b *testing.B) {
	b.Run("hand-written", func(b *testing.B) {
		m := newMetrics("")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.admitted("acme.echo", 0.00001)
				m.acquired("acme.echo", executor.AcquiredRecycled)
				m.call("acme.echo", "ok", 0.0004, true, 0.2, 1.5)
			}
		})
	})
	b.Run("client_golang", func(b *testing.B) {
		r := prometheus.NewRegistry()
		inv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inv"}, []string{"tool", "outcome"})
		acq := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "acq"}, []string{"tool", "path"})
		cpuMs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cpu_ms"}, []string{"tool"})
		h := func(name string, buckets []float64) *prometheus.HistogramVec {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Buckets: buckets}, []string{"tool"})
		}
		dur, cpu, mem, wait := h("dur", durationBuckets), h("cpu", cpuBuckets), h("mem", memBuckets), h("wait", waitBuckets)
		r.MustRegister(inv, acq, cpuMs, dur, cpu, mem, wait)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				wait.WithLabelValues("acme.echo").Observe(0.00001)
				acq.WithLabelValues("acme.echo", "recycled").Inc()
				inv.WithLabelValues("acme.echo", "ok").Inc()
				dur.WithLabelValues("acme.echo").Observe(0.0004)
				cpuMs.WithLabelValues("acme.echo").Add(0.2)
				cpu.WithLabelValues("acme.echo").Observe(0.0002)
				mem.WithLabelValues("acme.echo").Observe(1.5)
			}
		})
	})
}
