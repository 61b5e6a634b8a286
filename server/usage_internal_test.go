package server

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
)

// TestUsageHeaderIsJSONMarshal: the hand-written sandboxd-usage value is
// byte for byte what json.Marshal writes (the header's contract before
// it), for the values a call reports and the edges of encoding/json's
// float formatting (exponent form, the unpadded negative exponent, -0,
// refused NaN/Inf, fuel omitted at 0).
func TestUsageHeaderIsJSONMarshal(t *testing.T) {
	floats := []float64{0, math.Copysign(0, -1), 0.001, 0.012, 1, 1.5, 12.345, 64, 100.125, 1e-6, 9.99e-7, 1e-7, 1.5e-10,
		1e20, 1e21, 1.25e21, 1e100, -3.5, -1e-7, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1 + 0.2,
		math.NaN(), math.Inf(1), math.Inf(-1)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		floats = append(floats, math.Round(r.Float64()*1e6)/1e3, r.Float64()*math.Pow(10, float64(r.IntN(60)-30)),
			math.Float64frombits(r.Uint64()))
	}
	fuels := []int64{0, 1, -1, 378828, math.MaxInt64, math.MinInt64}
	n := 0
	for i, f := range floats {
		u := executor.Usage{CPUMs: f, WallMs: floats[(i+1)%len(floats)], PeakMemMB: floats[(i*7+3)%len(floats)], Fuel: fuels[i%len(fuels)]}
		want, _ := json.Marshal(&u)
		if got := usageHeader(&u); got != string(want) {
			t.Fatalf("usage %+v: header %q, json.Marshal %q", u, got, want)
		}
		if len(want) == 0 {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no usage json.Marshal refuses was tried")
	}
}

// BenchmarkUsageHeader: the sandboxd-usage value of a typical call, by
// hand and through json.Marshal (what answer did before).
//
//	go test -run '^$' -bench UsageHeader -benchmem ./server
func BenchmarkUsageHeader(b *testing.B) {
	u := executor.Usage{CPUMs: 0.048, WallMs: 0.061, PeakMemMB: 1.125, Fuel: 378828}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = usageHeader(&u)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = marshalUsage(&u)
		}
	})
}
