package dispatch

import (
	"context"
	"time"

	"github.com/rlsched/rlsched/internal/backoff"
)

// reconcileJitter spreads the reconciliations of several masters, which
// all start from the same LeaseTTL.
const reconcileJitter = 0.25

// reconcilePeriod is the pause before the next reconciliation: one lease
// TTL, ±25%.
func (c *recoverer) reconcilePeriod() time.Duration {
	b := backoff.Backoff{Min: c.leaseTTL, Max: c.leaseTTL, Jitter: reconcileJitter}
	return b.Delay()
}

// reconcile finds the active runs (DISPATCHED or RUNNING in the store)
// that nothing will ever find lost, and hands them to the path that
// startup recovery uses: their lease is restored for one hold, so that a
// worker that still runs one renews it, and otherwise the reaper (of any
// master) finds it expired and calls the run lost, fenced, exactly once.
//
// Such a run has no lease and no session of this master holds it. It is
// what a master leaves behind when it dies after it released or reaped a
// run's lease and before the store took the run's LOST and requeue
// writes (the store was down: reaper.lost keeps the retries only in
// memory), while another master lives on and never runs its startup
// recovery again (docs/reliability.md, "Reconciliation").
//
// One indexed query per period (ActiveTasks), plus a lease lookup per
// active run. Runs this master holds with a connected worker, and those
// whose lost writes it is retrying, are left alone; a run with a live
// lease is never touched.
func (c *recoverer) reconcile(ctx context.Context) {
	active, err := c.st.ActiveTasks(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn().Err(err).Msg("reconciliation: cannot read active runs")
		}
		return
	}
	for _, t := range active {
		if ctx.Err() != nil {
			return
		}
		if c.reg.heldLive(t.ID, t.Fence) || c.retrying.pending(t.ID) {
			continue
		}
		if _, ok, err := c.ls.Get(ctx, t.ID); err != nil {
			c.log.Warn().Err(err).Str("task", t.ID).Msg("reconciliation: cannot read a lease")
			return
		} else if ok {
			continue // its worker renews it, or the reaper will find it expired
		}
		if t.Worker == "" || t.Fence == 0 { // as at startup (recover)
			c.lost(ctx, t.ID, t.Fence, "active run without a worker")
			continue
		}
		// No live lease may mean one that expired since the last reap:
		// Restore would give that one a new hold (it replaces a dead lease),
		// putting off the run's loss by a hold, or for good on a clock that
		// stands still. Reap first; a run found lost there is requeued, and
		// the re-read below gives back the lease restored for it.
		c.reap(ctx)
		if err := c.restoreLease(ctx, t); err != nil {
			c.log.Warn().Err(err).Str("task", t.ID).Msg("reconciliation: cannot restore a lease")
			continue
		}
		// The run may have moved on since ActiveTasks read it (requeued by
		// a master's late write): a lease left at the old fence would hold
		// up the claim of its next attempt for a whole hold.
		if now, err := c.st.Task(ctx, t.ID); err == nil && (!now.Status.Active() || now.Fence != t.Fence) {
			_ = c.ls.Release(ctx, t.ID, t.Fence)
			continue
		}
		c.log.Warn().Str("task", t.ID).Str("worker", t.Worker).Uint64("fence", t.Fence).
			Msg("reconciliation: an active run had no lease; restored it for one hold, then it is lost unless its worker renews it")
	}
}
