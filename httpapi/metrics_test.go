package httpapi

import (
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/promcheck"
)

// TestMetricsRoute: /metrics is public, passes promtool, answers under any
// Host (Prometheus scrapes by address), and counts requests by route
// template and status class, never by raw path.
func TestMetricsRoute(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	for range 2 {
		if r := e.req("GET", "/api/tasks/r-unknown", tok, nil); r.status != 404 {
			t.Fatalf("unknown run: %d", r.status)
		}
	}
	e.req("GET", "/api/nope", tok, nil)
	e.req("GET", "/runs", "", nil)
	if r := e.req("GET", "/metrics", "", nil, "Host", "10.1.2.3:9100"); r.status != 200 {
		t.Fatalf("/metrics under a foreign Host: %d", r.status)
	}
	body := promcheck.Scrape(t, e.url+"/metrics")
	promcheck.Check(t, body)
	f := promcheck.Parse(t, body)
	want := func(v float64, labels ...string) {
		t.Helper()
		if got, ok := f.Value("rlsched_http_requests_total", labels...); !ok || got != v {
			t.Errorf("rlsched_http_requests_total%v = %v (present %v), want %v", labels, got, ok, v)
		}
	}
	want(2, "route", "/api/tasks/{id}", "status_class", "4xx")
	want(1, "route", "unmatched", "status_class", "4xx")
	want(1, "route", "ui", "status_class", "2xx")
	want(1, "route", "/metrics", "status_class", "2xx")
	if got, _ := f.Value("rlsched_http_request_duration_seconds", "route", "/api/tasks/{id}"); got != 2 {
		t.Errorf("request durations of /api/tasks/{id}: %v, want 2", got)
	}
	for _, m := range f["rlsched_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && (l.GetValue() == "/api/tasks/r-unknown" || l.GetValue() == "/api/nope") {
				t.Errorf("a raw path became a label: %s", l.GetValue())
			}
		}
	}
}
