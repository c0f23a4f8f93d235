package dispatch

import (
	"context"
	"time"

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
	tasks, err := m.st.QueuedTasks(ctx, plan.Batch)
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
	if plan.LookDeeper(len(placements), len(tasks)) {
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
	placed := m.execute(ctx, placements, snap.Users)
	m.cfg.Metrics.SchedulerPass(time.Since(start)) // passes that planned: the others cost nothing
	return plan.PassAgain(placed, len(tasks))
}
