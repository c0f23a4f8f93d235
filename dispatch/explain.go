package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// explainQueueDepth bounds how much of the queue Explain reads; runs further
// back get no explanation.
const explainQueueDepth = 2000

// explainTTL is how long one explanation of the queue is reused. Listings
// come from every open dashboard; a reason a fraction of a second old is as
// good as a fresh one, and a run the cached answer does not know (just
// submitted) forces a fresh one anyway.
const explainTTL = 250 * time.Millisecond

// explainer answers Explain: it plans the queue as the scheduler does and
// caches the last plan. It owns the cache; its own mutex, never the
// registry's, guards it, so a slow store read never holds up scheduling.
// It never places a run. explain is safe from any goroutine (REST
// listings).
type explainer struct {
	queue  queueReader
	inputs *planInputs

	mu   sync.Mutex
	at   time.Time
	info map[string]core.QueueInfo
}

// Explain implements httpapi.QueueExplainer: it plans the queue as the
// scheduler will (plan.Plan, the scheduler's own function, over the store's
// queue order and a snapshot of the registry) and says, for each queued
// run, where it stands and why it has not started. Only this master's
// workers are known; with several masters sharing a store, a run may start
// on another master's worker first.
func (d *Dispatcher) Explain(ctx context.Context, queued []core.Task) map[string]core.QueueInfo {
	return d.explain.explain(ctx, queued)
}

func (e *explainer) explain(ctx context.Context, queued []core.Task) map[string]core.QueueInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Wall time, not Config.Clock: the cache's age is compared with the
	// runs' CreatedAt, which the REST layer stamps.
	fresh := e.info != nil && time.Since(e.at) < explainTTL
	for _, t := range queued {
		if !fresh {
			break
		}
		// A run submitted since the plan needs a new one; an older run it
		// lacks is beyond explainQueueDepth, or no longer queued.
		if _, ok := e.info[t.ID]; !ok && !t.CreatedAt.Before(e.at) {
			fresh = false
		}
	}
	if !fresh {
		queue, err := e.queue.QueuedTasks(ctx, explainQueueDepth)
		if err != nil {
			return nil // an explanation is never worth an error
		}
		snap, err := e.inputs.snapshot(ctx, queue)
		if err != nil {
			return nil
		}
		e.info, e.at = plan.Plan(snap, queue).Waiting, time.Now()
	}
	out := make(map[string]core.QueueInfo, len(queued))
	for _, t := range queued {
		if qi, ok := e.info[t.ID]; ok {
			out[t.ID] = qi
		}
	}
	return out
}
