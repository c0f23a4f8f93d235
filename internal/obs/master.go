package obs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rlsched/rlsched/core"
	"github.com/valyala/fasthttp"
)

// MasterMetricsOptions tunes a MasterMetrics; the zero value is the default.
type MasterMetricsOptions struct {
	// MaxGPUSeries caps rlsched_gpu_utilization_ratio (default 1024
	// series, e.g. 128 machines of 8 GPUs). Past it the GPUs that sort
	// last by (worker, gpu) are left out of the scrape and counted in
	// rlsched_gpu_utilization_series_dropped.
	MaxGPUSeries int
	// MaxRoutes caps the route label of the HTTP metrics (default 256);
	// routes past it share the route "other".
	MaxRoutes int
}

// finishedStatuses are the values of rlsched_runs_finished_total's status:
// the terminal statuses, in core's order.
var finishedStatuses = [...]core.Status{core.StatusSucceeded, core.StatusFailed, core.StatusCancelled, core.StatusTimeout}

// MasterMetrics holds one master's metrics in its own registry.
//
// Every method is safe from any goroutine. The typed methods (Heartbeat,
// RunMoved, StoreCommit, ...) cost an atomic add or a histogram
// observation: call them on hot paths, on event loops included.
type MasterMetrics struct {
	reg     *prometheus.Registry
	handler fasthttp.RequestHandler
	src     atomic.Pointer[Sources]
	maxGPU  int

	submitted     prometheus.Counter
	finished      [len(finishedStatuses)]prometheus.Counter
	lost          prometheus.Counter
	dispatch      prometheus.Histogram
	schedPass     prometheus.Histogram
	heartbeats    prometheus.Counter
	storeCommit   prometheus.Histogram
	storeBatch    prometheus.Histogram
	artifactBytes prometheus.Counter

	routes *routeTable
}

// NewMasterMetrics makes a master's metrics, with the Go and process
// collectors, in a new registry.
func NewMasterMetrics(opts MasterMetricsOptions) *MasterMetrics {
	if opts.MaxGPUSeries <= 0 {
		opts.MaxGPUSeries = 1024
	}
	if opts.MaxRoutes <= 0 {
		opts.MaxRoutes = 256
	}
	reg := newRegistry()
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	m := &MasterMetrics{reg: reg, maxGPU: opts.MaxGPUSeries}
	m.submitted = counter("rlsched_runs_submitted_total", "Runs accepted (submissions, reruns, sweep members).")
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rlsched_runs_finished_total",
		Help: "Runs that reached a terminal status, by that status."}, []string{"status"})
	reg.MustRegister(finished)
	for i, s := range finishedStatuses {
		m.finished[i] = finished.WithLabelValues(string(s))
	}
	m.lost = counter("rlsched_runs_lost_total", "Times a run was lost with its worker (then requeued or failed).")
	m.dispatch = histogram("rlsched_dispatch_seconds",
		"Time a run waited QUEUED: from its submission (or requeue) to its dispatch to a worker.", dispatchBuckets)
	m.schedPass = histogram("rlsched_scheduler_pass_seconds",
		"Time of one scheduler pass: plan the queue against the free GPUs and hand out placements.", passBuckets)
	m.heartbeats = counter("rlsched_heartbeats_total", "Worker heartbeats received.")
	m.storeCommit = histogram("rlsched_store_commit_seconds", "Time of one store commit (a transaction, batched writes included).", commitBuckets)
	m.storeBatch = histogram("rlsched_store_batch_rows", "Rows written by one batched store commit (log offsets, metric points, events).", batchBuckets)
	m.artifactBytes = counter("rlsched_artifact_bytes_total", "Bytes of run output files received from workers.")
	m.routes = newRouteTable(reg, "rlsched_http", opts.MaxRoutes)
	reg.MustRegister(&masterCollector{m: m})
	m.handler = newHandler(reg)
	return m
}

// newRegistry is a registry with the Go and process collectors and the
// build's version.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rlsched_build_info",
			Help:        "Always 1; the version label is this binary's rlsched version.",
			ConstLabels: prometheus.Labels{"version": core.Version}}, func() float64 { return 1 }))
	return reg
}

// Registry is where the master's metrics live, for a caller that adds its
// own collectors.
func (m *MasterMetrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' text format (GET /metrics).
func (m *MasterMetrics) Handler() fasthttp.RequestHandler { return m.handler }

// RunsCreated counts n runs accepted (store.Observer).
func (m *MasterMetrics) RunsCreated(n int) { m.submitted.Add(float64(n)) }

// RunMoved counts a committed change of a run's status (store.Observer):
// a terminal status as RunFinished, LOST as RunLost, and the wait of a
// run dispatched from the queue as Dispatched.
func (m *MasterMetrics) RunMoved(from, to core.Status, queued time.Duration) {
	switch {
	case to.Terminal():
		m.RunFinished(to)
	case to == core.StatusLost:
		m.RunLost()
	case from == core.StatusQueued && to == core.StatusDispatched:
		m.Dispatched(queued)
	}
}

// RunFinished counts a run that reached the terminal status s; any other
// status counts nothing (LOST is RunLost).
func (m *MasterMetrics) RunFinished(s core.Status) {
	switch s {
	case core.StatusSucceeded:
		m.finished[0].Inc()
	case core.StatusFailed:
		m.finished[1].Inc()
	case core.StatusCancelled:
		m.finished[2].Inc()
	case core.StatusTimeout:
		m.finished[3].Inc()
	}
}

// RunLost counts a run lost with its worker, whatever happens to it next.
func (m *MasterMetrics) RunLost() { m.lost.Inc() }

// Dispatched records the wait of a run dispatched to a worker: from its
// submission (or requeue) on.
func (m *MasterMetrics) Dispatched(wait time.Duration) { m.dispatch.Observe(wait.Seconds()) }

// SchedulerPass records the time of one scheduler pass.
func (m *MasterMetrics) SchedulerPass(d time.Duration) { m.schedPass.Observe(d.Seconds()) }

// Heartbeat counts one worker heartbeat.
func (m *MasterMetrics) Heartbeat() { m.heartbeats.Inc() }

// StoreCommit records one store commit of d that wrote rows rows (0 when
// the commit is not a batch: it is then left out of the batch sizes).
func (m *MasterMetrics) StoreCommit(d time.Duration, rows int) {
	m.storeCommit.Observe(d.Seconds())
	if rows > 0 {
		m.storeBatch.Observe(float64(rows))
	}
}

// ArtifactBytes counts n bytes of run output received.
func (m *MasterMetrics) ArtifactBytes(n int64) { m.artifactBytes.Add(float64(n)) }

// Route returns the HTTP metrics of one route template (such as
// "/api/tasks/{id}", never a raw path). Call it once per route when the
// router is built and keep the result; the same template returns the same
// Route.
func (m *MasterMetrics) Route(template string) *Route { return m.routes.route(template) }

// routeTable hands out one Route per template, up to a cap.
type routeTable struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	max      int

	mu     sync.Mutex
	routes map[string]*Route // guarded by mu
}

func newRouteTable(reg *prometheus.Registry, prefix string, max int) *routeTable {
	t := &routeTable{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_requests_total",
			Help: "HTTP requests answered, by route template and status class."}, []string{"route", "status_class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_request_duration_seconds",
			Help: "Time to answer an HTTP request, by route template.", Buckets: requestBuckets}, []string{"route"}),
		max:    max,
		routes: map[string]*Route{},
	}
	reg.MustRegister(t.requests, t.duration)
	return t
}

func (t *routeTable) route(template string) *Route {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.routes[template]; ok {
		return r
	}
	name := template
	if len(t.routes) >= t.max {
		name = "other"
		if r, ok := t.routes[name]; ok {
			return r
		}
	}
	r := &Route{duration: t.duration.WithLabelValues(name)}
	for i, c := range statusClasses {
		r.requests[i] = t.requests.WithLabelValues(name, c)
	}
	t.routes[name] = r
	return r
}

// Route is the HTTP metrics of one route template. Safe from any goroutine.
type Route struct {
	requests [len(statusClasses)]prometheus.Counter
	duration prometheus.Observer
}

// Observe records one request answered with status after d.
func (r *Route) Observe(status int, d time.Duration) {
	r.requests[classOf(status)].Inc()
	r.duration.Observe(d.Seconds())
}
