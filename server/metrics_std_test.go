package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/server"
)

// /metrics carries the standard go_*, process_* and sandboxd_build_info
// series beside the per-tool histograms in base units, the acquisition
// counts by path and the fair-queue gauges.
func TestMetricsStandardAndCallSeries(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: standardTools(t)}, server.Options{})
	if r := ts.invoke(t, invokeBody("t.membomb", `{}`)); r.status != 200 {
		t.Fatalf("membomb: %d", r.status)
	}
	for i := 0; i < 3; i++ {
		if r := ts.invoke(t, invokeBody("t.echo", `{"name":"x"}`)); r.status != 200 {
			t.Fatalf("invoke: %d %s", r.status, r.body)
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", ts.url+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	body := string(b)
	for _, want := range []string{
		"# TYPE go_goroutines gauge", "go_memstats_heap_alloc_bytes ", "# TYPE process_cpu_seconds_total counter",
		"process_resident_memory_bytes ", "process_open_fds ", `sandboxd_build_info{goversion="go`,
		`sandboxd_call_duration_seconds_count{tool="t.echo"} 3`,
		`sandboxd_invocation_duration_seconds_count{tool="t.echo"} 3`,
		`sandboxd_call_cpu_seconds_count{tool="t.echo"} 3`,
		`sandboxd_admission_wait_seconds_count{tool="t.echo"} 3`,
		"# TYPE sandboxd_instance_acquisitions_total counter",
		`sandboxd_limits_exceeded_total{tool="t.membomb",limit="memMB"} 1`,
		"sandboxd_admission_tenants_waiting 0", "sandboxd_admission_tenant_queue_depth_max 0",
		`sandboxd_admission_refused_total{reason="tenant-queue-full"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var n int
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, `sandboxd_instance_acquisitions_total{tool="t.echo",path=`) {
			var v int
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				n += v
			}
		}
	}
	if n != 3 {
		t.Errorf("acquisitions of t.echo by path sum to %d, want 3:\n%s", n, grepLines(body, "sandboxd_instance_acquisitions_total"))
	}
	if strings.Count(body, "# TYPE go_goroutines ") != 1 {
		t.Error("go_goroutines is exposed more than once")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
