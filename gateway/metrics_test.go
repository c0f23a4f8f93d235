package gateway_test

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/gateway"
	"github.com/rlsched/rlsched/gateway/discovery"
	"github.com/rlsched/rlsched/internal/testkit/promcheck"
)

// TestMetricsScrape: the gateway's /metrics passes promtool, and its series
// move with the traffic they count (by route class, status class and
// service; attempts by instance; refusals; canary choices).
func TestMetricsScrape(t *testing.T) {
	stable, canary := okUpstream(t, "stable"), okUpstream(t, "canary")
	_, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{stable}, []string{canary})
	tok := bearer(testToken(t, 1, "alice", "USER"))
	for range 3 {
		if a := do(t, "GET", gwURL+"/api/tasks", "", tok...); a.Status != 200 {
			t.Fatalf("GET /api/tasks: %d", a.Status)
		}
	}
	if a := do(t, "GET", gwURL+"/api/tasks", "", append(tok, "X-Canary", "true")...); a.Status != 200 || string(a.Body) != "canary" {
		t.Fatalf("canary: %d %s", a.Status, a.Body)
	}
	if a := do(t, "GET", gwURL+"/api/tasks", ""); a.Status != 401 {
		t.Fatalf("without a token: %d", a.Status)
	}
	body := promcheck.Scrape(t, gwURL+"/metrics")
	promcheck.Check(t, body)
	f := promcheck.Parse(t, body)
	want := func(v float64, name string, labels ...string) {
		t.Helper()
		if got, ok := f.Value(name, labels...); !ok || got != v {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
		}
	}
	want(3, "rlsched_gateway_requests_total", "route", "api", "status_class", "2xx", "service", discovery.ServiceStable)
	want(1, "rlsched_gateway_requests_total", "route", "api", "status_class", "2xx", "service", discovery.ServiceCanary)
	want(1, "rlsched_gateway_requests_total", "route", "api", "status_class", "4xx", "service", "gateway")
	want(3, "rlsched_gateway_upstream_attempts_total", "upstream", stable, "result", "ok")
	want(3, "rlsched_gateway_upstream_duration_seconds", "service", discovery.ServiceStable)
	want(1, "rlsched_gateway_canary_choices_total", "reason", "header")
	want(1, "rlsched_gateway_auth_refused_total")
	want(1, "rlsched_gateway_upstream_available", "upstream", stable, "service", discovery.ServiceStable, "canary", "false")
}

// TestMetricsForgetUpstream: an instance that leaves the route table takes
// its series with it.
func TestMetricsForgetUpstream(t *testing.T) {
	a, b := okUpstream(t, "a"), okUpstream(t, "b")
	g, gwURL := startGW(t, gateway.Config{HealthInterval: time.Hour}, []string{a, b}, nil)
	tok := bearer(testToken(t, 1, "alice", "USER"))
	for range 4 {
		do(t, "GET", gwURL+"/api/tasks", "", tok...)
	}
	f := promcheck.Parse(t, promcheck.Scrape(t, gwURL+"/metrics"))
	if _, ok := f.Value("rlsched_gateway_upstream_attempts_total", "upstream", a); !ok {
		t.Fatalf("no series of %s before it leaves", a)
	}
	if err := g.SetInstances("static", discovery.ServiceStable, []gateway.Instance{{URL: b, Service: discovery.ServiceStable}}); err != nil {
		t.Fatal(err)
	}
	f = promcheck.Parse(t, promcheck.Scrape(t, gwURL+"/metrics"))
	if _, ok := f.Value("rlsched_gateway_upstream_attempts_total", "upstream", a); ok {
		t.Errorf("%s left but its attempts are still reported", a)
	}
	if _, ok := f.Value("rlsched_gateway_upstream_available", "upstream", a); ok {
		t.Errorf("%s left but is still reported available", a)
	}
	if _, ok := f.Value("rlsched_gateway_upstream_attempts_total", "upstream", b); !ok {
		t.Errorf("%s stays but lost its series", b)
	}
}
