package logpipe

import (
	"context"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
)

// maxRetryPoints bounds the metric points kept while the store is down
// (≈ 40 bytes each: 40 MiB). Past it the oldest run's points are dropped and
// counted, so a long outage cannot exhaust the master's memory.
const maxRetryPoints = 1 << 20

// metricRetry keeps metric points the store refused and writes them again
// with backoff. Their log bytes are already written and acked, so the worker
// never resends them: without this, a metric printed while the database is
// down would be lost for good. AppendMetrics keeps one value per (run, name,
// step), so writing a point twice is harmless.
type metricRetry struct {
	w    *Writer
	mu   sync.Mutex
	runs map[string][]core.MetricPoint
	n    int
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

func newMetricRetry(w *Writer) *metricRetry {
	r := &metricRetry{w: w, runs: map[string][]core.MetricPoint{}, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

// add keeps a copy of pts for another try.
func (r *metricRetry) add(taskID string, pts []core.MetricPoint) {
	r.mu.Lock()
	r.runs[taskID] = append(r.runs[taskID], pts...)
	r.n += len(pts)
	for id, p := range r.runs { // map order: an arbitrary run; all are equally old news
		if r.n <= maxRetryPoints {
			break
		}
		r.n -= len(p)
		delete(r.runs, id)
		r.w.metricDropped.Add(int64(len(p)))
		r.w.log.Error().Str("task", id).Int("points", len(p)).Msg("dropping metric points: the store has been unavailable too long")
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pending is how many points wait for the store.
func (r *metricRetry) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *metricRetry) loop() {
	defer close(r.done)
	const first, most = 200 * time.Millisecond, 5 * time.Second
	delay := first
	for {
		select {
		case <-r.quit:
			return
		case <-r.wake:
		}
		for r.pending() > 0 {
			select {
			case <-r.quit:
				return
			case <-time.After(delay):
			}
			if r.flush() {
				delay = first
			} else {
				delay = min(2*delay, most)
			}
		}
	}
}

// flush tries every run's points once; false when one still failed.
func (r *metricRetry) flush() bool {
	r.mu.Lock()
	runs := r.runs
	r.runs, r.n = map[string][]core.MetricPoint{}, 0
	r.mu.Unlock()
	ok := true
	for id, pts := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.w.cfg.Store.AppendMetrics(ctx, id, pts)
		cancel()
		if err == nil {
			r.w.log.Info().Str("task", id).Int("points", len(pts)).Msg("stored metric points kept while the store was unavailable")
			continue
		}
		ok = false
		r.mu.Lock()
		r.runs[id] = append(pts, r.runs[id]...)
		r.n += len(pts)
		r.mu.Unlock()
	}
	return ok
}

func (r *metricRetry) close() {
	close(r.quit)
	<-r.done
}
