package obs

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlsched/rlsched/core"
)

// Sources are the master's callbacks for the gauges, read at each scrape.
// Each is called from the scrape's goroutine, so it must be safe from any
// goroutine and quick (it should read a snapshot its owner keeps, not take
// a lock an event loop holds or query the store per call). A nil callback
// leaves its metric out of the scrape.
type Sources struct {
	// Runs counts runs by status (rlsched_runs), store-wide: every master
	// of a deployment reports the same counts (dashboards take max()).
	// Every status of core is reported, those missing from the map as 0;
	// other keys are ignored.
	Runs func() map[core.Status]int
	// QueueDepth is the number of runs waiting for a worker, store-wide
	// like Runs.
	QueueDepth func() int
	// Workers counts the workers this master's registry holds by state
	// (dashboards sum() over masters); reported like Runs.
	Workers func() map[core.WorkerState]int
	// GPUs counts the GPUs of the live workers of this master by state.
	GPUs func() GPUCounts
	// GPUUtilization calls emit once per GPU with a utilisation reading,
	// ratio in 0..1. A (worker, gpu) emitted twice is reported once; a
	// worker id core.ValidWorkerID refuses is left out.
	GPUUtilization func(emit func(worker string, gpu int, ratio float64))
	// WSSubscribers is the number of WebSocket clients connected.
	WSSubscribers func() int
	// PlannerQueue is the number of events waiting for the planner.
	PlannerQueue func() int
	// LogPipe is the log pipe's counters (its own: the pipe counts them
	// anyway, so the metrics read them rather than keep a twin).
	LogPipe func() LogPipeStats
}

// LogPipeStats are the values of the log pipe's metrics: Bytes taken into
// the pipe and Busy frames refused since start (counters), Queued frames
// not yet written (a gauge).
type LogPipeStats struct{ Bytes, Busy, Queued int64 }

// GPUCounts are the values of rlsched_gpus. Busy: held by a run; Foreign:
// not held by a run but used by a process no run started (given to no
// run); Free: neither.
type GPUCounts struct{ Free, Busy, Foreign int }

// SetSources installs the gauges' callbacks, replacing those set before.
// A scrape before the first call reports none of these gauges.
func (m *MasterMetrics) SetSources(s Sources) { m.src.Store(&s) }

// runStatuses and workerStates are the label values always reported.
var (
	runStatuses  = core.Statuses()
	workerStates = [...]core.WorkerState{core.WorkerIdle, core.WorkerRunning, core.WorkerPending, core.WorkerDown, core.WorkerDraining}
)

var (
	runsDesc       = prometheus.NewDesc("rlsched_runs", "Runs by status, as the store has them now.", []string{"status"}, nil)
	queueDesc      = prometheus.NewDesc("rlsched_queue_depth", "Runs waiting for a worker.", nil, nil)
	workersDesc    = prometheus.NewDesc("rlsched_workers", "Workers known to this master, by state.", []string{"state"}, nil)
	gpusDesc       = prometheus.NewDesc("rlsched_gpus", "GPUs of live workers: free, busy (held by a run), foreign (used by a process no run started).", []string{"state"}, nil)
	gpuUtilDesc    = prometheus.NewDesc("rlsched_gpu_utilization_ratio", "GPU utilisation at the worker's last sample, 0 to 1.", []string{"worker", "gpu"}, nil)
	gpuDroppedDesc = prometheus.NewDesc("rlsched_gpu_utilization_series_dropped", "GPUs left out of rlsched_gpu_utilization_ratio at this scrape by its series cap.", nil, nil)
	wsDesc         = prometheus.NewDesc("rlsched_ws_subscribers", "WebSocket clients connected to this master.", nil, nil)
	plannerDesc    = prometheus.NewDesc("rlsched_planner_queue_length", "Events waiting for the scheduler's planner: worker reports queued on the dispatcher's shards.", nil, nil)
	logQueueDesc   = prometheus.NewDesc("rlsched_logpipe_queue_depth", "Log frames queued in the log pipe, not yet written.", nil, nil)
	logBytesDesc   = prometheus.NewDesc("rlsched_log_bytes_total", "Run log bytes taken into the log pipe (duplicates of resent bytes excluded).", nil, nil)
	logBusyDesc    = prometheus.NewDesc("rlsched_logpipe_busy_total", "Log frames refused \"busy\" because the log pipe's queue was full (the worker resends).", nil, nil)
)

// masterCollector reports the Sources at scrape time.
type masterCollector struct{ m *MasterMetrics }

func (c *masterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsDesc, queueDesc, workersDesc, gpusDesc, gpuUtilDesc,
		gpuDroppedDesc, wsDesc, plannerDesc, logQueueDesc, logBytesDesc, logBusyDesc} {
		ch <- d
	}
}

func (c *masterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.src.Load()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	scalar := func(d *prometheus.Desc, f func() int) {
		if f != nil {
			gauge(d, f())
		}
	}
	if s.Runs != nil {
		n := s.Runs()
		for _, st := range runStatuses {
			gauge(runsDesc, n[st], string(st))
		}
	}
	scalar(queueDesc, s.QueueDepth)
	if s.Workers != nil {
		n := s.Workers()
		for _, st := range workerStates {
			gauge(workersDesc, n[st], string(st))
		}
	}
	if s.GPUs != nil {
		g := s.GPUs()
		gauge(gpusDesc, g.Free, "free")
		gauge(gpusDesc, g.Busy, "busy")
		gauge(gpusDesc, g.Foreign, "foreign")
	}
	if s.GPUUtilization != nil {
		c.collectGPUUtil(ch, s.GPUUtilization)
	}
	scalar(wsDesc, s.WSSubscribers)
	scalar(plannerDesc, s.PlannerQueue)
	if s.LogPipe != nil {
		l := s.LogPipe()
		gauge(logQueueDesc, int(l.Queued))
		ch <- prometheus.MustNewConstMetric(logBytesDesc, prometheus.CounterValue, float64(l.Bytes))
		ch <- prometheus.MustNewConstMetric(logBusyDesc, prometheus.CounterValue, float64(l.Busy))
	}
}

type gpuReading struct {
	worker string
	gpu    int
	ratio  float64
}

// collectGPUUtil reports at most maxGPU readings: those first by (worker,
// gpu), so the same GPUs stay in the scrape from one scrape to the next
// rather than whichever the callback happened to emit first.
func (c *masterCollector) collectGPUUtil(ch chan<- prometheus.Metric, visit func(func(string, int, float64))) {
	var rs []gpuReading
	visit(func(w string, g int, r float64) {
		if core.ValidWorkerID(w) { // a label value must be UTF-8; ids are checked at Hello
			rs = append(rs, gpuReading{w, g, r})
		}
	})
	slices.SortFunc(rs, func(a, b gpuReading) int {
		return cmp.Or(cmp.Compare(a.worker, b.worker), cmp.Compare(a.gpu, b.gpu))
	})
	rs = slices.CompactFunc(rs, func(a, b gpuReading) bool { return a.worker == b.worker && a.gpu == b.gpu })
	dropped := 0
	if len(rs) > c.m.maxGPU {
		dropped = len(rs) - c.m.maxGPU
		rs = rs[:c.m.maxGPU]
	}
	for _, r := range rs {
		ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, r.ratio, r.worker, strconv.Itoa(r.gpu))
	}
	ch <- prometheus.MustNewConstMetric(gpuDroppedDesc, prometheus.GaugeValue, float64(dropped))
}
