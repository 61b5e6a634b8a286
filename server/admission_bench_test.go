package server

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAdmission is one call's admission (enter, then leave) when a
// slot is free, alone and from parallel callers of 8 tenants: what fair
// admission adds to every call.
//
//	go test -run '^$' -bench Admission -count 6 ./server
func BenchmarkAdmission(b *testing.B) {
	o := Options{MaxConcurrency: 16, QueueSize: 64, PerTenantConcurrency: 16, PerTenantQueue: 16, PerTenantCPUWindow: DefaultCPUWindow}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		a, tool := newAdmission(o), &toolSlots{cap: 12}
		b.ReportAllocs()
		for b.Loop() {
			s, _, _, _ := a.enter(ctx, time.Time{}, "tenant-1", tool)
			a.leave(s, 0.5)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		a, tool := newAdmission(o), &toolSlots{cap: 1 << 20}
		a.capacity = 1 << 20 // never waits: the uncontended path under parallel callers
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			tenant := "tenant-" + strconv.Itoa(int(n.Add(1)%8))
			for pb.Next() {
				s, _, _, _ := a.enter(ctx, time.Time{}, tenant, tool)
				a.leave(s, 0.5)
			}
		})
	})
}
