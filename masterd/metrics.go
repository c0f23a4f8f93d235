package masterd

import (
	"context"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/store"
)

// runCountsMaxAge bounds how often a scrape counts the store's runs: the
// count is a scan of the runs, and Prometheus may scrape every master
// every few seconds.
const runCountsMaxAge = 5 * time.Second

// runCounts are the store's runs by status as last counted: a scrape
// recounts when they are older than runCountsMaxAge, and keeps the last
// counts when the store does not answer (a scrape is no health check).
type runCounts struct {
	st store.Store

	mu   sync.Mutex
	at   time.Time
	last map[core.Status]int
}

func (c *runCounts) get() map[core.Status]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < runCountsMaxAge {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n, err := c.st.CountByStatus(ctx); err == nil {
		c.last, c.at = n, time.Now()
	}
	return c.last
}

// metricSources are the gauges' callbacks over the master's rooms.
func (m *Master) metricSources() obs.Sources {
	counts := &runCounts{st: m.raw}
	return obs.Sources{
		Runs:       counts.get,
		QueueDepth: func() int { return counts.get()[core.StatusQueued] },
		// This master's own registry, not the cluster's view: dashboards
		// sum the masters.
		Workers: func() map[core.WorkerState]int {
			n := map[core.WorkerState]int{}
			for _, w := range m.disp.Workers() {
				n[w.State]++
			}
			return n
		},
		GPUs: func() obs.GPUCounts {
			var g obs.GPUCounts
			for _, w := range m.disp.Workers() {
				if w.State == core.WorkerDown || w.State == core.WorkerPending {
					continue // not live
				}
				for _, gpu := range w.GPUs {
					switch {
					case gpu.TaskID != "":
						g.Busy++
					case len(gpu.Foreign) > 0:
						g.Foreign++ // free by rlsched's books, taken in fact
					default:
						g.Free++
					}
				}
			}
			return g
		},
		GPUUtilization: func(emit func(worker string, gpu int, ratio float64)) {
			for _, w := range m.disp.Workers() {
				for _, gpu := range w.GPUs {
					if gpu.Utilization != nil {
						emit(w.ID, gpu.Index, float64(*gpu.Utilization)/100)
					}
				}
			}
		},
		WSSubscribers: func() int { return int(m.hub.Stats().Subscribers) },
		PlannerQueue:  m.disp.Backlog,
		LogPipe: func() obs.LogPipeStats {
			t := m.logs.Totals()
			return obs.LogPipeStats{Bytes: t.Bytes, Busy: t.Busy, Queued: t.Queued}
		},
	}
}
