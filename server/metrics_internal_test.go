package server

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/egress"
)

func TestEgressAndPoolMetrics(t *testing.T) {
	m := newMetrics("")
	m.egressAttempts("acme.fetch", []egress.Attempt{{Allowed: true}, {Allowed: true}, {Allowed: false}})
	m.egressAttempts("acme.fetch", nil)
	var b strings.Builder
	m.write(&b, gauges{toolInflight: map[string]int{}, poolReady: map[string]int{"acme.echo": 1}, poolCap: map[string]int{"acme.echo": 2}, poolRecycled: map[string]int64{"acme.echo": 5}, imageInstances: map[string]int64{"acme.echo": 3}})
	for _, want := range []string{
		`sandboxd_egress_requests_total{tool="acme.fetch",decision="allowed"} 2`,
		`sandboxd_egress_requests_total{tool="acme.fetch",decision="denied"} 1`,
		`sandboxd_pool_ready_instances{tool="acme.echo"} 1`,
		`sandboxd_pool_target_instances{tool="acme.echo"} 2`,
		`sandboxd_pool_recycled_calls_total{tool="acme.echo"} 5`,
		`sandboxd_image_instances_total{tool="acme.echo"} 3`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}
