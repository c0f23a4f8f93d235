package store

import (
	"context"
	"time"

	"github.com/rlsched/rlsched/core"
)

// metricsFirstWait bounds how long a run's end waits for its metric points:
// past it the end is written anyway (an unavailable store refuses the end
// too, and the points stay queued to retry).
const metricsFirstWait = 5 * time.Second

// MetricsWaiter is what MetricsFirst waits on: what hands the metric points
// of runs' output to the store (the log pipe's Writer).
type MetricsWaiter interface {
	// WaitMetrics returns once the points of run id extracted so far were
	// handed to the store, or when ctx ends.
	WaitMetrics(ctx context.Context, id string) error
}

// MetricsFirst wraps st so that an update that ends a run (to a terminal
// status) is written only after the metric points its output carried were
// handed to the store (w.WaitMetrics). A worker reports a run's end
// only once every byte of its output is acked, and the acks come as soon
// as the points are queued, not stored; without this a client that sees the
// run finished could still miss its last points. Everything else passes
// through. Safe for concurrent use, as st is.
func MetricsFirst(st Store, w MetricsWaiter) Store {
	return &metricsFirst{Store: st, w: w}
}

type metricsFirst struct {
	Store
	w MetricsWaiter
}

func (m *metricsFirst) waitFor(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, metricsFirstWait)
	defer cancel()
	_ = m.w.WaitMetrics(ctx, id) // past the bound the end goes first
}

func (m *metricsFirst) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	if t.Status.Terminal() {
		m.waitFor(ctx, t.ID)
	}
	return m.Store.UpdateTask(ctx, t, exp)
}

func (m *metricsFirst) UpdateTasks(ctx context.Context, us []Update) []error {
	for _, u := range us {
		if u.Task.Status.Terminal() {
			m.waitFor(ctx, u.Task.ID)
		}
	}
	return m.Store.UpdateTasks(ctx, us)
}
