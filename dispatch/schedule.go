package dispatch

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// scheduleLoop places queued runs whenever woken (a submission, a worker
// joining, a run ending) and once a second as a safety net.
func (m *Master) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-tick.C:
			m.preemptTick(ctx) // preempt.go
		}
		for m.schedule(ctx) {
		}
	}
}

// schedule runs one pass: it reads a page of the queue, has plan.Place place
// it on a snapshot of the registry, and executes the placements (execute.go).
// It reports whether another pass may place more (plan.PassAgain).
//
// The snapshot is taken only when there is both a free resource somewhere
// and a queued run: every joining worker wakes the scheduler, and building
// it for 15,000 workers at each of those wakes, under the registry lock
// that every Hello also takes, was what made a reconnect storm slow.
func (m *Master) schedule(ctx context.Context) bool {
	start := time.Now()
	if !m.reg.anyFree() {
		return false
	}
	tasks, read, err := m.queue.page(ctx, m.st, m.now())
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot read the queue")
		}
		return false
	}
	if len(tasks) == 0 {
		return false
	}
	snap := m.reg.snapshot(tasks)
	if len(snap.Free) == 0 {
		return false
	}
	if snap.Sweeps, err = m.sweepLimits(ctx, tasks); err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot read the limits of sweeps")
		}
		return false
	}
	if snap.Users, err = m.users(ctx); err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot read the users' usage and quotas")
		}
		return false
	}
	snap.ReserveBefore = m.reserveBefore()
	placements := plan.Place(snap, tasks)
	if plan.LookDeeper(len(placements), read) {
		deep, err := m.st.QueuedTasks(ctx, plan.Deep)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error().Err(err).Msg("cannot read the queue")
			}
			return false
		}
		if len(deep) > len(tasks) {
			snap.InFlight = m.reg.inFlight(deep)
			if snap.Sweeps, err = m.sweepLimits(ctx, deep); err != nil {
				if ctx.Err() == nil {
					m.log.Error().Err(err).Msg("cannot read the limits of sweeps")
				}
				return false
			}
			placements = plan.Place(snap, deep)
		}
	}
	done := m.execute(ctx, placements, snap.Users)
	m.queue.taken(done)
	m.cfg.Metrics.SchedulerPass(time.Since(start)) // passes that planned: the others cost nothing
	placed := 0
	for _, ok := range done {
		if ok {
			placed++
		}
	}
	return plan.PassAgain(placed, read)
}

// pageTTL bounds how long the page of the queue one pass read serves the
// passes after it.
const pageTTL = time.Second

// queuePage is the page of the queue the last pass read, less the runs
// passes placed since. A pass woken by freed capacity (a run ended, a
// worker joined) places from it instead of reading the queue again:
// with real workers each freed slot woke a pass that read and decoded
// 256 queued runs to place one, 58% of the master's CPU in the
// dispatch-proc benchmark. It is read again when the queue may have
// changed (Master.Notify: a run created, requeued or reprioritised here
// or by another master), when half of it was placed, and after pageTTL.
// A run of it that left the queue some other way is refused by its claim
// or its fenced DISPATCHED write, as when two masters race for it.
type queuePage struct {
	changed atomic.Uint64 // bumped by Master.Notify
	// Only the scheduler's goroutine touches the rest.
	runs  []core.Task
	read  int // runs the read returned (plan.Batch: the queue may hold more)
	gen   uint64
	at    time.Time
	valid bool
}

// page returns the runs to plan and how many the read returned.
func (q *queuePage) page(ctx context.Context, st store.Store, now time.Time) ([]core.Task, int, error) {
	gen := q.changed.Load()
	if q.valid && gen == q.gen && now.Sub(q.at) < pageTTL && !now.Before(q.at) && 2*len(q.runs) >= q.read {
		return q.runs, q.read, nil
	}
	q.valid = false
	runs, err := st.QueuedTasks(ctx, plan.Batch)
	if err != nil {
		return nil, 0, err
	}
	q.runs, q.read, q.gen, q.at, q.valid = runs, len(runs), gen, now, true
	return runs, len(runs), nil
}

// taken drops the runs a pass placed, or found gone from the queue.
func (q *queuePage) taken(ids map[string]bool) {
	if len(ids) == 0 || !q.valid {
		return
	}
	kept := q.runs[:0:0]
	for _, t := range q.runs {
		if _, done := ids[t.ID]; !done {
			kept = append(kept, t)
		}
	}
	q.runs = kept
}
