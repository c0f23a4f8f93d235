package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// Preemption, the master's side: after a pass, the QUEUED runs of the page
// that did not start for want of GPUs, cores or memory may have
// preemptible runs of lower priority on
// this master's workers stopped for them (plan.Preempt decides which). A
// victim gets CancelTask with its own grace (SIGTERM, the grace, SIGKILL
// on the worker, which uploads its outputs first); its end is recorded as
// a preemption (core.Task.Preempt: QUEUED again, attempt + 1, not a
// retry), and the preemptor takes what they freed at a later pass.

// DefaultPreemptCooldown is PREEMPT_COOLDOWN_SECONDS's default.
const DefaultPreemptCooldown = 300 * time.Second

// MaxPreemptionsPerPass bounds the preemptions one pass starts (rlsched sim
// bounds its own the same).
const MaxPreemptionsPerPass = 4

// runPolicy is what preemption knows of a run this master placed.
type runPolicy struct {
	priority    int
	preemptible bool
	grace       time.Duration
	interactive bool      // a session (issue 34)
	placedAt    time.Time // stands for its start: most recently placed, preempted first
	preemptedAt time.Time
}

// policyOf is t's runPolicy, placed at now.
func policyOf(t *core.Task, now time.Time) *runPolicy {
	p := &runPolicy{priority: t.Priority, preemptible: t.Preemptible, grace: t.PreemptGrace(), placedAt: now,
		interactive: t.Kind == core.KindInteractive}
	if t.PreemptedAt != nil {
		p.preemptedAt = *t.PreemptedAt
	}
	return p
}

// preemptFor is a victim's mark: the run it is stopped for.
type preemptFor struct {
	by       string
	priority int
}

// preempter is preemption's component. It keeps no state of its own: the
// mark of a victim lives on its run (runRec.preempt), set through the
// registry (markPreempt), and the victim's end is recorded by the reports'
// path (preemptFromReport). It never preempts a run this master did not
// place (only those have a runPolicy) and never blocks on a worker: the
// CancelTask is queued on the session. tick runs on the scheduler's
// goroutine only.
type preempter struct {
	queue    queueReader
	inputs   *planInputs
	reg      *registry
	cooldown time.Duration // Policy.PreemptCooldown; < 0: off
	// sessions: Policy.InteractivePreempts.
	sessions bool
	now      func() time.Time
	log      zerolog.Logger
}

// queueReader is what preemption reads of the store.
type queueReader interface {
	QueuedTasks(ctx context.Context, limit int) ([]core.Task, error)
}

// tick looks for runs to preempt, once a second from the scheduler's loop,
// and only while this master's workers run preemptible runs (so it costs
// nothing otherwise). It plans the queue's first page as a pass would and
// preempts for the runs that would not start.
func (p *preempter) tick(ctx context.Context) {
	if p.cooldown < 0 || !p.reg.anyPreemptible() {
		return
	}
	tasks, err := p.queue.QueuedTasks(ctx, plan.Batch)
	if err != nil || len(tasks) == 0 {
		return
	}
	snap, err := p.inputs.snapshot(ctx, tasks)
	if err != nil {
		return
	}
	p.preempt(tasks, plan.Place(snap, tasks), snap)
}

// preempt chooses and stops victims for the runs of page that did not
// start (placed), as the plan's snapshot snap saw the quotas and sweeps.
func (p *preempter) preempt(page []core.Task, placed []plan.Placement, snap plan.Snapshot) {
	waiting := plan.Waiting(snap, page, placed)
	if len(waiting) == 0 {
		return
	}
	nodes, recs := p.reg.preemptNodes()
	if len(nodes) == 0 {
		return
	}
	ps := plan.Preempt(plan.PreemptInput{Nodes: nodes, Waiting: waiting, Max: MaxPreemptionsPerPass,
		CooldownSince: p.now().Add(-p.cooldown), InteractiveOverBatch: p.sessions})
	for _, pr := range ps {
		for _, id := range pr.Victims {
			rr := recs[id]
			if rr == nil || !p.reg.markPreempt(rr, preemptFor{by: pr.For.ID, priority: pr.For.Priority}) {
				continue
			}
			p.send(rr)
		}
	}
}

// send tells rr's worker to stop it with its grace.
func (p *preempter) send(rr *runRec) {
	mark := rr.preempt.Load()
	sess := p.reg.session(rr)
	if mark == nil || rr.pol == nil || sess == nil {
		return
	}
	reason := fmt.Sprintf("preempted by %s (priority %d)", mark.by, mark.priority)
	if err := sess.send(&pb.CancelTask{TaskId: rr.taskID, Attempt: int32(rr.attempt), Fence: rr.fence.Load(),
		Reason: reason, GraceMs: rr.pol.grace.Milliseconds()}); err != nil {
		p.log.Warn().Str("task", rr.taskID).Err(err).Msg("cannot send the preemption")
		return
	}
	p.log.Info().Str("task", rr.taskID).Str("for", mark.by).Dur("grace", rr.pol.grace).Msg("run preempted")
}

// preemptFromReport records the end of a preempted run: QUEUED again.
func preemptFromReport(t *core.Task, mark *preemptFor, now time.Time) error {
	return t.Preempt(fmt.Sprintf("preempted by %s (priority %d)", mark.by, mark.priority), now)
}
