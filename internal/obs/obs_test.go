package obs

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/promcheck"
	"github.com/valyala/fasthttp"
)

// serve starts a real fasthttp server for h on a free loopback port and
// returns its /metrics URL.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return "http://" + ln.Addr().String() + "/metrics"
}

// exercisedMaster is a MasterMetrics with every metric of its registry given a
// sample: sources set, every typed method called.
func exercisedMaster(t testing.TB) *MasterMetrics {
	m := NewMasterMetrics(MasterMetricsOptions{})
	m.SetSources(Sources{
		Runs:       func() map[core.Status]int { return map[core.Status]int{core.StatusQueued: 3, core.StatusRunning: 2} },
		QueueDepth: func() int { return 3 },
		Workers: func() map[core.WorkerState]int {
			return map[core.WorkerState]int{core.WorkerIdle: 1, core.WorkerRunning: 1}
		},
		GPUs: func() GPUCounts { return GPUCounts{Free: 5, Busy: 2, Foreign: 1} },
		GPUUtilization: func(emit func(string, int, float64)) {
			emit("gpu1-3f9a2c", 0, 0.97)
			emit("gpu1-3f9a2c", 1, 0)
			emit("gpu2-77aa01", 0, 0.5)
		},
		WSSubscribers: func() int { return 4 },
		PlannerQueue:  func() int { return 1 },
		LogPipe:       func() LogPipeStats { return LogPipeStats{Bytes: 4096, Busy: 1, Queued: 7} },
	})
	m.RunsCreated(1)
	for _, s := range finishedStatuses {
		m.RunFinished(s)
	}
	m.RunLost()
	m.Dispatched(1500 * time.Millisecond)
	m.SchedulerPass(80 * time.Microsecond)
	m.Heartbeat()
	m.StoreCommit(3*time.Millisecond, 17)
	m.ArtifactBytes(1 << 20)
	m.Route("/api/tasks/{id}").Observe(200, 2*time.Millisecond)
	m.Route("/api/train").Observe(429, time.Millisecond)
	return m
}

// exercisedGateway is the same for a GatewayMetrics.
func exercisedGateway(t testing.TB) *GatewayMetrics {
	g := NewGatewayMetrics(GatewayMetricsOptions{})
	g.SetSources(GatewaySources{Upstreams: func(emit func(UpstreamState)) {
		emit(UpstreamState{URL: "http://10.0.0.1:8082", Service: "rl-master", Available: true, Conns: 3})
		emit(UpstreamState{URL: "http://10.0.0.2:8082", Service: "rl-master-canary", Canary: true})
	}})
	for _, svc := range []string{"", "rl-master", "rl-master-canary"} {
		g.Service(svc).Request(GatewayAPI, 200, time.Millisecond)
	}
	g.Service("rl-master").Request(GatewaySubmit, 503, 5*time.Second)
	u := g.Upstream("http://10.0.0.1:8082", "rl-master")
	u.Attempt(AttemptOK, 3*time.Millisecond)
	u.Attempt(AttemptTimeout, 5*time.Second)
	u.Ejected()
	g.Canary(CanaryPercent)
	g.RateLimited()
	g.RateLimitError()
	g.AuthRefused()
	g.Fallback()
	g.WebSocketOpened()
	return g
}

func TestScrapePassesPromtool(t *testing.T) {
	f := func(name string, h fasthttp.RequestHandler, reg *prometheus.Registry) {
		t.Helper()
		body := promcheck.Scrape(t, serve(t, h))
		promcheck.Check(t, body)
		// Every family of the registry is in the scrape: none was left
		// out for want of a sample, so promtool saw them all.
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams := promcheck.Parse(t, body)
		for _, mf := range mfs {
			if fams[mf.GetName()] == nil {
				t.Errorf("%s: %s is registered but not in the scrape", name, mf.GetName())
			}
		}
	}
	m := exercisedMaster(t)
	f("master", m.Handler(), m.Registry())
	g := exercisedGateway(t)
	f("gateway", g.Handler(), g.Registry())
}

// TestMasterNamesAPI holds the master's scrape to API.md's list.
func TestMasterNamesAPI(t *testing.T) {
	m := exercisedMaster(t)
	fams := promcheck.Parse(t, promcheck.Scrape(t, serve(t, m.Handler())))
	for _, name := range []string{"rlsched_runs", "rlsched_queue_depth", "rlsched_workers", "rlsched_gpus",
		"rlsched_runs_finished_total", "rlsched_dispatch_seconds", "rlsched_log_bytes_total",
		"rlsched_heartbeats_total", "rlsched_store_commit_seconds", "rlsched_ws_subscribers",
		"rlsched_gpu_utilization_ratio", "go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("%s missing from the scrape", name)
		}
	}
	for _, s := range runStatuses {
		if _, ok := fams.Value("rlsched_runs", "status", string(s)); !ok {
			t.Errorf("rlsched_runs{status=%q} missing", s)
		}
	}
	for _, s := range []string{"free", "busy", "foreign"} {
		if _, ok := fams.Value("rlsched_gpus", "state", s); !ok {
			t.Errorf("rlsched_gpus{state=%q} missing", s)
		}
	}
}

func TestMasterValuesMove(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	url := serve(t, m.Handler())
	route := m.Route("/api/tasks/{id}")
	f := func(call func(), name string, want float64, labels ...string) {
		t.Helper()
		before, _ := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		call()
		after, ok := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		if !ok || after-before != want {
			t.Errorf("%s%v moved by %v (present %v), want %v", name, labels, after-before, ok, want)
		}
	}
	f(func() { m.RunsCreated(3) }, "rlsched_runs_submitted_total", 3)
	f(func() { m.RunFinished(core.StatusFailed) }, "rlsched_runs_finished_total", 1, "status", "FAILED")
	f(func() { m.RunFinished(core.StatusRunning) }, "rlsched_runs_finished_total", 0, "status", "FAILED")
	f(func() { m.RunFinished(core.StatusTimeout) }, "rlsched_runs_finished_total", 1, "status", "TIMEOUT")
	f(m.RunLost, "rlsched_runs_lost_total", 1)
	f(func() { m.Dispatched(time.Minute) }, "rlsched_dispatch_seconds", 1)
	f(func() { m.SchedulerPass(time.Millisecond) }, "rlsched_scheduler_pass_seconds", 1)
	f(m.Heartbeat, "rlsched_heartbeats_total", 1)
	f(func() { m.StoreCommit(time.Millisecond, 5) }, "rlsched_store_commit_seconds", 1)
	f(func() { m.StoreCommit(time.Millisecond, 5) }, "rlsched_store_batch_rows", 1)
	f(func() { m.StoreCommit(time.Millisecond, 0) }, "rlsched_store_batch_rows", 0)
	f(func() { m.ArtifactBytes(1 << 30) }, "rlsched_artifact_bytes_total", 1<<30)
	f(func() { route.Observe(404, time.Millisecond) }, "rlsched_http_requests_total", 1, "route", "/api/tasks/{id}", "status_class", "4xx")
	f(func() { m.Route("/api/tasks/{id}").Observe(200, time.Millisecond) }, "rlsched_http_requests_total", 1, "route", "/api/tasks/{id}", "status_class", "2xx")
	f(func() { route.Observe(999, time.Millisecond) }, "rlsched_http_requests_total", 1, "route", "/api/tasks/{id}", "status_class", "5xx")
	f(func() { route.Observe(200, time.Millisecond) }, "rlsched_http_request_duration_seconds", 1, "route", "/api/tasks/{id}")

	// A histogram observation lands in the right bucket.
	m.Dispatched(90 * time.Second)
	fams := promcheck.Parse(t, promcheck.Scrape(t, url))
	for _, b := range fams["rlsched_dispatch_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		want := uint64(0) // Dispatched(time.Minute) above, and 90 s now
		switch {
		case b.GetUpperBound() >= 90:
			want = 2
		case b.GetUpperBound() >= 60:
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// TestRunMoved: a store's report of a status change counts what it means.
func TestRunMoved(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	url := serve(t, m.Handler())
	f := func(call func(), name string, want float64, labels ...string) {
		t.Helper()
		before, _ := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		call()
		after, _ := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		if after-before != want {
			t.Errorf("%s%v moved by %v, want %v", name, labels, after-before, want)
		}
	}
	f(func() { m.RunMoved(core.StatusRunning, core.StatusFailed, 0) }, "rlsched_runs_finished_total", 1, "status", "FAILED")
	f(func() { m.RunMoved(core.StatusRunning, core.StatusLost, 0) }, "rlsched_runs_lost_total", 1)
	f(func() { m.RunMoved(core.StatusLost, core.StatusQueued, 0) }, "rlsched_runs_lost_total", 0)
	f(func() { m.RunMoved(core.StatusQueued, core.StatusDispatched, time.Second) }, "rlsched_dispatch_seconds", 1)
	f(func() { m.RunMoved(core.StatusDispatched, core.StatusRunning, time.Second) }, "rlsched_dispatch_seconds", 0)
	f(func() { m.RunMoved(core.StatusLost, core.StatusFailed, 0) }, "rlsched_runs_finished_total", 1, "status", "FAILED")
}

func TestMasterSources(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	url := serve(t, m.Handler())
	fams := promcheck.Parse(t, promcheck.Scrape(t, url))
	for _, name := range []string{"rlsched_runs", "rlsched_queue_depth", "rlsched_gpu_utilization_ratio"} {
		if fams[name] != nil {
			t.Errorf("%s reported before SetSources", name)
		}
	}

	var queue atomic.Int64 // read by the server's goroutine at each scrape
	m.SetSources(Sources{
		QueueDepth: func() int { return int(queue.Load()) },
		Workers: func() map[core.WorkerState]int {
			return map[core.WorkerState]int{core.WorkerDown: 2, "BOGUS": 9}
		},
	})
	f := func(name string, want float64, labels ...string) {
		t.Helper()
		got, ok := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		if !ok || got != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
	}
	f("rlsched_queue_depth", 0)
	queue.Store(12) // read at the next scrape, not cached
	f("rlsched_queue_depth", 12)
	f("rlsched_workers", 2, "state", "DOWN")
	f("rlsched_workers", 0, "state", "IDLE")
	fams = promcheck.Parse(t, promcheck.Scrape(t, url))
	if n := fams.Series("rlsched_workers"); n != len(workerStates) {
		t.Errorf("rlsched_workers has %d series, want the %d known states (BOGUS left out)", n, len(workerStates))
	}
	if fams["rlsched_runs"] != nil {
		t.Error("rlsched_runs reported without a Runs source")
	}
}

func TestGPUUtilizationCap(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{MaxGPUSeries: 3})
	url := serve(t, m.Handler())
	m.SetSources(Sources{GPUUtilization: func(emit func(string, int, float64)) {
		emit("w2", 1, 0.2)
		emit("w1", 1, 0.1)
		emit("w1", 1, 0.1) // twice: one series
		emit("w3", 0, 0.3)
		emit("w1", 0, 0.05)
		emit("w2", 0, 0.4)
		emit("bad worker/../", 0, 1) // not a worker id: left out
	}})
	body := promcheck.Scrape(t, url)
	promcheck.Check(t, body)
	fams := promcheck.Parse(t, body)
	if n := fams.Series("rlsched_gpu_utilization_ratio"); n != 3 {
		t.Fatalf("%d series, want the cap of 3", n)
	}
	f := func(worker, gpu string, want float64, present bool) {
		t.Helper()
		got, ok := fams.Value("rlsched_gpu_utilization_ratio", "worker", worker, "gpu", gpu)
		if ok != present || got != want {
			t.Errorf("%s/%s = %v (present %v), want %v (present %v)", worker, gpu, got, ok, want, present)
		}
	}
	// Kept: the first three by (worker, gpu), whatever order they came in.
	f("w1", "0", 0.05, true)
	f("w1", "1", 0.1, true)
	f("w2", "0", 0.4, true)
	f("w2", "1", 0, false)
	f("w3", "0", 0, false)
	if d, _ := fams.Value("rlsched_gpu_utilization_series_dropped"); d != 2 {
		t.Errorf("dropped = %v, want 2", d)
	}
}

func TestRouteCap(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{MaxRoutes: 2})
	a, b := m.Route("/a"), m.Route("/b")
	if m.Route("/a") != a {
		t.Error("the same template gave a second Route")
	}
	c, d := m.Route("/c"), m.Route("/d")
	if c != d || c == a || c == b {
		t.Error("routes past the cap must share one Route")
	}
	for _, r := range []*Route{a, b, c, d} {
		r.Observe(200, time.Millisecond)
	}
	fams := promcheck.Parse(t, promcheck.Scrape(t, serve(t, m.Handler())))
	if n := fams.Series("rlsched_http_request_duration_seconds"); n != 3 {
		t.Errorf("%d route series, want 3 (/a, /b, other)", n)
	}
	if v, _ := fams.Value("rlsched_http_requests_total", "route", "other", "status_class", "2xx"); v != 2 {
		t.Errorf("other = %v, want 2", v)
	}
}

func TestGatewayValuesMove(t *testing.T) {
	g := NewGatewayMetrics(GatewayMetricsOptions{})
	url := serve(t, g.Handler())
	svc := g.Service("rl-master")
	up := g.Upstream("http://10.0.0.1:8082", "rl-master")
	f := func(call func(), name string, want float64, labels ...string) {
		t.Helper()
		before, _ := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		call()
		after, ok := promcheck.Parse(t, promcheck.Scrape(t, url)).Value(name, labels...)
		if !ok || after-before != want {
			t.Errorf("%s%v moved by %v (present %v), want %v", name, labels, after-before, ok, want)
		}
	}
	f(func() { svc.Request(GatewayWS, 101, time.Millisecond) }, "rlsched_gateway_requests_total", 1,
		"route", "ws", "status_class", "1xx", "service", "rl-master")
	f(func() { g.Service("").Request(GatewayActuator, 200, time.Millisecond) }, "rlsched_gateway_requests_total", 1,
		"route", "actuator", "status_class", "2xx", "service", "gateway")
	f(func() { svc.Request(GatewaySubmit, 200, time.Millisecond) }, "rlsched_gateway_request_duration_seconds", 1,
		"route", "submit", "service", "rl-master")
	f(func() { up.Attempt(AttemptOK, time.Millisecond) }, "rlsched_gateway_upstream_duration_seconds", 1, "service", "rl-master")
	f(func() { up.Attempt(AttemptTimeout, time.Second) }, "rlsched_gateway_upstream_duration_seconds", 0, "service", "rl-master")
	f(func() { up.Attempt(AttemptTimeout, time.Second) }, "rlsched_gateway_upstream_attempts_total", 1,
		"upstream", "http://10.0.0.1:8082", "result", "timeout")
	f(up.Ejected, "rlsched_gateway_upstream_ejections_total", 1, "upstream", "http://10.0.0.1:8082")
	f(func() { g.Canary(CanaryUser) }, "rlsched_gateway_canary_choices_total", 1, "reason", "user")
	f(g.RateLimited, "rlsched_gateway_rate_limited_total", 1)
	f(g.RateLimitError, "rlsched_gateway_rate_limit_redis_errors_total", 1)
	f(g.AuthRefused, "rlsched_gateway_auth_refused_total", 1)
	f(g.Fallback, "rlsched_gateway_fallback_total", 1)
	f(g.WebSocketOpened, "rlsched_gateway_websockets_active", 1)
	f(g.WebSocketClosed, "rlsched_gateway_websockets_active", -1)

	g.SetSources(GatewaySources{Upstreams: func(emit func(UpstreamState)) {
		emit(UpstreamState{URL: "http://a:1", Service: "rl-master", Available: true, Conns: 2})
		emit(UpstreamState{URL: "http://a:1", Service: "rl-master"}) // twice: reported once
		emit(UpstreamState{URL: "http://b:1", Service: "rl-master-canary", Canary: true})
	}})
	fams := promcheck.Parse(t, promcheck.Scrape(t, url))
	if v, ok := fams.Value("rlsched_gateway_upstream_available", "upstream", "http://a:1", "canary", "false"); !ok || v != 1 {
		t.Errorf("a available = %v (%v), want 1", v, ok)
	}
	if v, ok := fams.Value("rlsched_gateway_upstream_available", "upstream", "http://b:1", "canary", "true"); !ok || v != 0 {
		t.Errorf("b available = %v (%v), want 0", v, ok)
	}
	if v, _ := fams.Value("rlsched_gateway_upstream_connections", "upstream", "http://a:1"); v != 2 {
		t.Errorf("a connections = %v, want 2", v)
	}
	if n := fams.Series("rlsched_gateway_upstream_available"); n != 2 {
		t.Errorf("%d upstream series, want 2", n)
	}
}

func TestGatewayUpstreamsBounded(t *testing.T) {
	g := NewGatewayMetrics(GatewayMetricsOptions{MaxUpstreams: 2, MaxServices: 2})
	url := serve(t, g.Handler())
	for i := range 5 {
		g.Upstream(fmt.Sprintf("http://10.0.0.%d:8082", i), "rl-master").Attempt(AttemptOK, time.Millisecond)
	}
	g.Upstream("http://\xff:1", "rl-master").Attempt(AttemptOK, time.Millisecond) // not UTF-8
	fams := promcheck.Parse(t, promcheck.Scrape(t, url))
	if v, _ := fams.Value("rlsched_gateway_upstream_attempts_total", "upstream", "other", "result", "ok"); v != 4 {
		t.Errorf("other = %v, want the 4 past the cap", v)
	}
	if n := fams.Series("rlsched_gateway_upstream_ejections_total"); n != 3 {
		t.Errorf("%d ejection series, want 3 (two instances and other)", n)
	}

	// A forgotten instance's series go, and its slot is free again.
	g.ForgetUpstream("http://10.0.0.0:8082")
	g.Upstream("http://10.0.0.9:8082", "rl-master").Attempt(AttemptOK, time.Millisecond)
	fams = promcheck.Parse(t, promcheck.Scrape(t, url))
	if _, ok := fams.Value("rlsched_gateway_upstream_attempts_total", "upstream", "http://10.0.0.0:8082"); ok {
		t.Error("forgotten instance still reported")
	}
	if v, _ := fams.Value("rlsched_gateway_upstream_attempts_total", "upstream", "http://10.0.0.9:8082", "result", "ok"); v != 1 {
		t.Errorf("new instance = %v, want 1", v)
	}

	// Services past the cap share "other"; "" is the gateway's own.
	for _, s := range []string{"a", "b", "c", "d\xff"} {
		g.Service(s).Request(GatewayAPI, 200, time.Millisecond)
	}
	fams = promcheck.Parse(t, promcheck.Scrape(t, url))
	if v, _ := fams.Value("rlsched_gateway_requests_total", "service", "other", "route", "api", "status_class", "2xx"); v != 3 {
		t.Errorf("other service = %v, want 3 (b, c and the non-UTF-8 name; rl-master took a slot)", v)
	}
}

// A collector's bug is a 500 that names it, not a scrape that silently
// lacks series.
func TestHandlerReportsGatherError(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	m.Registry().MustRegister(badCollector{})
	var ctx fasthttp.RequestCtx
	m.Handler()(&ctx)
	if ctx.Response.StatusCode() != 500 || !strings.Contains(string(ctx.Response.Body()), "cannot gather metrics") {
		t.Fatalf("got %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

type badCollector struct{}

var badDesc = prometheus.NewDesc("rlsched_test_bad", "Reports one series twice.", nil, nil)

func (badCollector) Describe(ch chan<- *prometheus.Desc) { ch <- badDesc }
func (badCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(badDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(badDesc, prometheus.GaugeValue, 2)
}

// Typed methods, route and upstream lookups, SetSources and scrapes from
// many goroutines at once (run with -race), and every count arrives.
func TestConcurrentUse(t *testing.T) {
	m := NewMasterMetrics(MasterMetricsOptions{})
	g := NewGatewayMetrics(GatewayMetricsOptions{})
	url := serve(t, m.Handler())
	const workers, calls = 4, 500
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range calls {
				m.Heartbeat()
				m.RunsCreated(2)
				m.Route("/api/tasks/{id}").Observe(200, time.Millisecond)
				g.Upstream(fmt.Sprintf("http://10.0.0.%d:1", j%3), "rl-master").Attempt(AttemptOK, time.Millisecond)
				g.Service("rl-master").Request(GatewayAPI, 200, time.Millisecond)
				if j%100 == 0 {
					n := i * j
					m.SetSources(Sources{QueueDepth: func() int { return n }})
				}
			}
		}()
	}
	for range 5 {
		promcheck.Parse(t, promcheck.Scrape(t, url))
	}
	wg.Wait()
	fams := promcheck.Parse(t, promcheck.Scrape(t, url))
	f := func(name string, want float64, labels ...string) {
		t.Helper()
		if got, _ := fams.Value(name, labels...); got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	f("rlsched_heartbeats_total", workers*calls)
	f("rlsched_runs_submitted_total", 2*workers*calls)
	f("rlsched_http_requests_total", workers*calls, "route", "/api/tasks/{id}", "status_class", "2xx")
	gfams := promcheck.Parse(t, promcheck.Scrape(t, serve(t, g.Handler())))
	var attempts float64
	for i := range 3 {
		v, _ := gfams.Value("rlsched_gateway_upstream_attempts_total", "upstream", fmt.Sprintf("http://10.0.0.%d:1", i), "result", "ok")
		attempts += v
	}
	if attempts != workers*calls {
		t.Errorf("upstream attempts = %v, want %d", attempts, workers*calls)
	}
}
