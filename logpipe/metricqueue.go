package logpipe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
)

// The metric points a writer extracts are stored by a goroutine of their
// own, behind a bounded queue, so that a slow or unavailable store never
// holds up a writer goroutine, and with it the acks of the log bytes: the
// points of a batch are queued (add never blocks) and the bytes acked at
// once. Policy when the queue holds MetricQueuePoints points (the store is
// down, or slower than the runs print): the points offered are dropped and
// counted (metric_dropped), those held are still written. Points the store
// refuses are kept and written again with backoff (200 ms doubling to 5 s),
// because their log bytes are acked and never resent; AppendMetrics keeps
// one value per (run, name, step), so a point written twice is harmless.

// metricCall bounds one AppendMetrics call.
const metricCall = 10 * time.Second

// metricRun is what the queue holds for one run.
type metricRun struct {
	pts     []core.MetricPoint
	retry   int           // of pts, the points an attempt failed for (counted in retrying)
	written chan struct{} // closed once pts were attempted; nil until wait asks
}

// metricQueue hands extracted points to the store. Its methods are safe
// from any goroutine; add never blocks.
type metricQueue struct {
	store MetricStore
	log   zerolog.Logger
	max   int

	mu       sync.Mutex
	pending  map[string]*metricRun // waiting for the next attempt
	inflight map[string]*metricRun // being written now (the loop's own)
	held     int                   // points in pending and inflight
	retrying int                   // of held, points whose last attempt failed

	dropped, errors atomic.Int64 // points dropped; calls that failed for points not refused before
	drops           atomic.Int64 // times points were dropped
	wake            chan struct{}
	quit, done      chan struct{}
}

func newMetricQueue(st MetricStore, max int, log zerolog.Logger) *metricQueue {
	q := &metricQueue{store: st, log: log, max: max, pending: map[string]*metricRun{},
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go q.loop()
	return q
}

// add queues a copy of pts for run id, or drops them when the queue is
// full. Never blocks on the store.
func (q *metricQueue) add(id string, pts []core.MetricPoint) {
	q.mu.Lock()
	if q.held+len(pts) > q.max {
		q.mu.Unlock()
		// Logged at the 1st, 2nd, 4th, 8th... drop: a long outage cannot
		// flood the log.
		n := q.dropped.Add(int64(len(pts)))
		if k := q.drops.Add(1); k&(k-1) == 0 {
			q.log.Error().Str("task", id).Int("points", len(pts)).Int64("dropped", n).
				Msg("dropping metric points: the metric queue is full (the store is unavailable or too slow); check the database")
		}
		return
	}
	r := q.pending[id]
	if r == nil {
		r = &metricRun{}
		q.pending[id] = r
	}
	r.pts = append(r.pts, pts...)
	q.held += len(pts)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// stats returns the points held and, of them, those waiting after a failed
// attempt.
func (q *metricQueue) stats() (held, retrying int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held, q.retrying
}

// wait returns once every point of run id queued before the call was
// attempted at least once (stored, or kept to retry after an error), or
// when ctx ends.
func (q *metricQueue) wait(ctx context.Context, id string) error {
	q.mu.Lock()
	r := q.pending[id] // attempted after the ones in flight, so it suffices
	if r == nil {
		r = q.inflight[id]
	}
	if r == nil {
		q.mu.Unlock()
		return nil
	}
	if r.written == nil {
		r.written = make(chan struct{})
	}
	ch := r.written
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *metricQueue) loop() {
	defer close(q.done)
	bo := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		select {
		case <-q.quit:
			q.flushOnce(context.Background())
			return
		case <-q.wake:
		}
		for {
			ok, any := q.attempt(context.Background())
			if !any {
				break
			}
			if ok {
				bo.Reset()
				continue
			}
			select {
			case <-q.quit:
				q.flushOnce(context.Background())
				return
			case <-time.After(bo.Delay()):
			}
		}
	}
}

// flushOnce makes a last attempt at everything held, within metricCall in
// all, when the writer closes.
func (q *metricQueue) flushOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, metricCall)
	defer cancel()
	q.attempt(ctx)
}

// attempt writes every pending run's points once. any: there was something
// to write; ok: all of it was stored.
func (q *metricQueue) attempt(ctx context.Context) (ok, any bool) {
	q.mu.Lock()
	batch := q.pending
	if len(batch) == 0 {
		q.mu.Unlock()
		return true, false
	}
	q.pending, q.inflight = map[string]*metricRun{}, batch
	q.mu.Unlock()
	ok = true
	for id, r := range batch {
		cctx, cancel := context.WithTimeout(ctx, metricCall)
		err := q.store.AppendMetrics(cctx, id, r.pts)
		cancel()
		q.mu.Lock()
		n := len(r.pts)
		q.retrying -= r.retry
		if err == nil {
			q.held -= n
			if r.retry > 0 {
				q.log.Info().Str("task", id).Int("points", n).Msg("stored metric points kept while the store was unavailable")
			}
		} else {
			ok = false
			if r.retry < n { // points the store had not refused before
				q.errors.Add(1)
			}
			q.log.Warn().Str("task", id).Err(err).Int("points", n).Msg("cannot store metric points; keeping them to retry")
			// Back in front of what arrived meanwhile; held is unchanged.
			nr := q.pending[id]
			if nr == nil {
				nr = &metricRun{}
				q.pending[id] = nr
			}
			nr.pts = append(r.pts, nr.pts...)
			nr.retry += n
			q.retrying += n
		}
		if r.written != nil {
			close(r.written)
		}
		delete(q.inflight, id)
		q.mu.Unlock()
	}
	return ok, true
}

func (q *metricQueue) close() {
	close(q.quit)
	<-q.done
}
