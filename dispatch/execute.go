package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/store"
)

// The executor does what plan.Plan decided: for each placement it claims the
// run's lease, then records every claimed run in the store at once, then
// sends each recorded run's ExecuteTask. It decides nothing: a placement it
// cannot carry out (worker gone, lease held by another master, run changed
// in the store) is dropped, and the run waits for the next pass.

var errNoSession = errors.New("worker not connected")

// claimed is a placement whose lease is claimed, not yet recorded.
type claimed struct {
	t     *core.Task
	rr    *runRec
	fence uint64
	exp   store.Expect
}

// execute carries out ps and returns the runs it recorded DISPATCHED
// (true) and those whose write found them no longer queued (false). users
// are the owners' quotas the plan was made with: each claim charges its
// run to them (lease.Charge).
func (s *scheduler) execute(ctx context.Context, ps []plan.Placement, users map[int64]plan.User) map[string]bool {
	var batch []*claimed
	for _, p := range ps {
		if c := s.claim(ctx, p, chargeOf(p.Task, users)); c != nil {
			batch = append(batch, c)
		}
	}
	return s.dispatch(ctx, batch)
}

// claim registers p's run as placed on its worker and claims its lease; nil
// when the worker is gone, the run is already placed or the claim failed.
func (s *scheduler) claim(ctx context.Context, p plan.Placement, charge lease.Charge) *claimed {
	t := p.Task
	rr := &runRec{taskID: t.ID, attempt: t.Attempt, traceID: t.TraceID, workerID: p.Worker, gpus: p.GPUs, userID: t.UserID,
		cpuMillis: core.CPUMillis(t.CPUs), memoryMB: t.MemoryMB, pol: policyOf(t, s.now())}
	if t.Fractional() {
		rr.share, rr.shareMB = t.GPUHundredths(), p.GPUMemoryMB
	}
	if len(p.Members) > 1 { // a multi-node group (group.go): every member placed, or none
		workers, gpus := make([]string, len(p.Members)), make([][]int, len(p.Members))
		for k, m := range p.Members {
			workers[k], gpus[k] = m.Worker, m.GPUs
		}
		if !s.reg.placeGroup(newGroup(rr, workers, gpus).members) {
			return nil
		}
	} else if !s.reg.place(rr) {
		return nil
	}

	fence, err := s.ls.ClaimCharged(ctx, t.ID, p.Worker, s.hold(), charge)
	if err != nil {
		ev := s.log.Warn()
		// Another master took it first, or another master's runs of the
		// owner took the quota: normal races, the run waits.
		if errors.Is(err, core.ErrLeaseHeld) || errors.Is(err, lease.ErrQuota) {
			ev = s.log.Debug()
		}
		ev.Str("task", t.ID).Err(err).Msg("cannot claim run")
		s.reg.remove(rr)
		return nil
	}
	return &claimed{t: t, rr: rr, fence: fence, exp: store.Expect{Fence: t.Fence, Status: core.StatusQueued}}
}

// dispatch records every claimed run in the store at once (QUEUED →
// DISPATCHED, fenced, one UpdateTasks: one commit for the whole pass), then
// sends each recorded run's ExecuteTask. It returns the runs recorded
// (true) and those the store refused (false: cancelled or taken meanwhile).
func (s *scheduler) dispatch(ctx context.Context, batch []*claimed) map[string]bool {
	if len(batch) == 0 {
		return nil
	}
	us := make([]store.Update, len(batch))
	for i, c := range batch {
		// From the queue's page, so QUEUED: Dispatch cannot refuse it.
		_ = c.t.Dispatch(c.rr.workerID, c.rr.gpus, c.fence)
		us[i] = store.Update{Task: c.t, Expect: c.exp}
	}
	errs := s.st.UpdateTasks(ctx, us)
	var moves []userMove
	placed := make(map[string]bool, len(batch))
	for i, c := range batch {
		if errs[i] != nil {
			// Cancelled or taken meanwhile: give the lease back.
			_ = s.ls.Release(ctx, c.t.ID, c.fence)
			s.reg.remove(c.rr)
			if !undecided(errs[i]) {
				placed[c.t.ID] = false
			}
			continue
		}
		moves = append(moves, userMove{userID: c.t.UserID, gpus: c.t.GPUs * c.t.Group(), runs: 1})
		placed[c.t.ID] = true
		s.send(ctx, c)
	}
	s.inputs.standingMoved(moves)
	return placed
}

// send tells a recorded run's worker to start it.
func (s *scheduler) send(ctx context.Context, c *claimed) {
	t, rr, fence, workerID, gpus := c.t, c.rr, c.fence, c.rr.workerID, c.rr.gpus
	view := *t // not t: that would keep the whole page of the queue alive
	rr.view.Store(&view)
	sess, cancelRequested := s.reg.sent(rr, fence)

	msg := &pb.ExecuteTask{TaskId: t.ID, Attempt: int32(t.Attempt), Fence: fence, Argv: t.Command, Env: t.Env,
		Workdir: t.Workdir, TraceId: t.TraceID, TimeoutSeconds: int64(t.TimeoutSeconds), ParamsJson: string(t.Params),
		User: t.User, CpuMillis: core.CPUMillis(t.CPUs), MemoryMb: t.MemoryMB,
		GpuFraction: t.GPUFraction, GpuMemoryMb: rr.shareMB,
		Interactive: t.Kind == core.KindInteractive, CodeTree: t.Code.Tree, CodeSubdir: t.Code.Subdir,
		Image: t.Image, RunToken: codec.RunToken(s.joinToken, workerID, t.ID, int32(t.Attempt), fence)}
	for _, g := range gpus {
		msg.GpuIndices = append(msg.GpuIndices, int32(g))
	}
	for _, d := range t.After {
		msg.Parents = append(msg.Parents, d.Run) // the worker's RLSCHED_PARENT_1..n
	}
	if py := t.Python; py != nil {
		msg.PythonRequirements, msg.PythonVenv = py.Requirements, py.Venv
	}
	if t.Resumes() || len(t.InputsFrom) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s.restore.restoreMsg(ctx, t, rr, msg) // restorestream.go
		cancel()
	}
	if rr.group != nil {
		s.groupMsg(rr.group, msg) // rank 0 first; the others once it reports its port (group.go)
	}
	var err error
	if sess == nil {
		err = errNoSession
	} else {
		err = sess.send(msg)
	}
	if err != nil {
		// The lease expires and the reaper requeues the run.
		s.log.Warn().Str("task", t.ID).Str("worker", workerID).Err(err).Msg("cannot send ExecuteTask")
		return
	}
	s.changed(workerID)
	s.log.Info().Str("task", t.ID).Str("worker", workerID).Ints("gpus", gpus).Int("attempt", t.Attempt).Uint64("fence", fence).Msg("run dispatched")
	if cancelRequested {
		s.resendCancel(rr)
	}
}
