package masterd

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/promcheck"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestMetricsMove: a started master's /metrics passes promtool, and its
// values move as a run is submitted, dispatched, logs and finishes: the
// counters of the store's writes (store.Observed), the log pipe's, the
// gauges read from the registry, the hub and the store.
func TestMetricsMove(t *testing.T) {
	m := start(t, Config{})
	url := m.URL() + "/metrics"
	before := promcheck.Parse(t, promcheck.Scrape(t, url))
	value := func(f promcheck.Families, name string, labels ...string) float64 {
		v, _ := f.Value(name, labels...)
		return v
	}
	exercise(t, m, "memory") // a worker joins, alice's run succeeds
	var after promcheck.Families
	var body []byte
	testutil.WaitFor(t, time.Minute, "the store's counts in the scrape", func() bool {
		body = promcheck.Scrape(t, url)
		after = promcheck.Parse(t, body)
		return value(after, "rlsched_runs", "status", "SUCCEEDED") == 1 // counted at most every 5 s
	})
	promcheck.Check(t, body)
	moved := func(name string, want float64, labels ...string) {
		t.Helper()
		if d := value(after, name, labels...) - value(before, name, labels...); d != want {
			t.Errorf("%s%v moved by %v, want %v", name, labels, d, want)
		}
	}
	grew := func(name string, labels ...string) {
		t.Helper()
		if value(after, name, labels...) <= value(before, name, labels...) {
			t.Errorf("%s%v did not grow: %v", name, labels, value(after, name, labels...))
		}
	}
	moved("rlsched_runs_submitted_total", 1)
	moved("rlsched_runs_finished_total", 1, "status", "SUCCEEDED")
	moved("rlsched_runs_finished_total", 0, "status", "FAILED")
	moved("rlsched_dispatch_seconds", 1)
	moved("rlsched_runs", 0, "status", "QUEUED")
	moved("rlsched_queue_depth", 0)
	grew("rlsched_log_bytes_total")
	grew("rlsched_store_commit_seconds")
	grew("rlsched_store_batch_rows")
	grew("rlsched_scheduler_pass_seconds")
	grew("rlsched_http_requests_total", "route", "/api/train", "status_class", "2xx")
	if v := value(after, "rlsched_workers", "state", "IDLE"); v != 1 {
		t.Errorf("rlsched_workers{state=IDLE} = %v, want 1", v)
	}
	if v := value(after, "rlsched_gpus", "state", "free"); v != 0 {
		t.Errorf("rlsched_gpus{state=free} = %v on a CPU worker", v)
	}
	for _, name := range []string{"rlsched_ws_subscribers", "rlsched_planner_queue_length", "rlsched_logpipe_queue_depth",
		"rlsched_logpipe_busy_total", "rlsched_heartbeats_total", "go_goroutines", "process_cpu_seconds_total"} {
		if after[name] == nil {
			t.Errorf("%s missing from the scrape", name)
		}
	}
}
