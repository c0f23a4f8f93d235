package httpapi

import (
	"context"

	"github.com/rlsched/rlsched/core"
)

// QueueExplainer is implemented by a Control that can say why QUEUED runs
// wait: their place in the scheduler's order and what they wait for. The
// REST layer puts the answer into the Task's queuePosition, pendingReason
// and pendingCode. Explain gets the QUEUED runs of one answer and returns
// what it knows, keyed by run id; runs it omits get no explanation. It must
// be fast (it runs on every listing that shows a queued run) and must not
// block the scheduler. The master's dispatcher (dispatch.Dispatcher) implements
// it with its scheduler's own planner (package dispatch/plan).
type QueueExplainer interface {
	Explain(ctx context.Context, queued []core.Task) map[string]core.QueueInfo
}

// explainQueue fills QueuePosition, PendingReason and PendingCode of the
// QUEUED runs in ts from the Control, when it is a QueueExplainer. Any
// failure leaves the runs unexplained: an explanation is never worth an
// error.
func (s *Server) explainQueue(ctx context.Context, ts []core.Task) {
	s.nameGPUs(ts)            // every answer with runs passes here
	s.explainWaiting(ctx, ts) // deps.go: the planner never sees them
	qe, ok := s.ctl.(QueueExplainer)
	if !ok {
		return
	}
	var queued []core.Task
	for _, t := range ts {
		if t.Status == core.StatusQueued && !t.Waiting {
			queued = append(queued, t)
		}
	}
	if len(queued) == 0 {
		return
	}
	info := qe.Explain(ctx, queued)
	for i := range ts {
		if ts[i].Status != core.StatusQueued || ts[i].Waiting {
			continue
		}
		if qi, ok := info[ts[i].ID]; ok {
			ts[i].QueuePosition, ts[i].PendingReason, ts[i].PendingCode = qi.Position, qi.Reason, qi.Code
		}
	}
}

// GPUNamer is implemented by a Control that knows its workers' GPUs
// (dispatch.Dispatcher): the UUIDs of GPUs indices of worker, "" for one it
// does not know.
type GPUNamer interface {
	GPUUUIDs(worker string, indices []int) []string
}

// nameGPUs fills GPUUUIDs of the runs in ts that were given GPUs. The
// UUIDs are the worker's as it reports them now (a GPU's UUID is fixed to
// the card), so a run on a forgotten worker has none.
func (s *Server) nameGPUs(ts []core.Task) {
	gn, ok := s.ctl.(GPUNamer)
	if !ok {
		return
	}
	for i := range ts {
		if ts[i].Worker != "" && len(ts[i].GPUIndices) > 0 {
			ts[i].GPUUUIDs = gn.GPUUUIDs(ts[i].Worker, ts[i].GPUIndices)
		}
	}
}
