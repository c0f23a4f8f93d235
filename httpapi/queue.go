package httpapi

import (
	"context"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// QueueExplainer is implemented by a Control that can say why QUEUED runs
// wait: their place in the scheduler's order and what they wait for. The
// REST layer puts the answer into the Task's queuePosition and
// pendingReason. Explain gets the QUEUED runs of one answer and returns what
// it knows, keyed by run id; runs it omits get no explanation. It must be
// fast (it runs on every listing that shows a queued run) and must not block
// the scheduler. The master's dispatcher (dispatch.Master) implements it by
// replaying its own scheduler; explainFallback serves any other Control.
type QueueExplainer interface {
	Explain(ctx context.Context, queued []core.Task) map[string]core.QueueInfo
}

// maxExplainedQueue bounds how much of the queue the fallback reads; runs
// further back get no position.
const maxExplainedQueue = 2000

// explainQueue fills QueuePosition and PendingReason of the QUEUED runs in
// ts, from the Control when it is a QueueExplainer, else from the store's
// queue order and the workers' free capacity (explainFallback). Any failure
// leaves the runs unexplained: an explanation is never worth an error.
func (s *Server) explainQueue(ctx context.Context, ts []core.Task) {
	var queued []core.Task
	for _, t := range ts {
		if t.Status == core.StatusQueued {
			queued = append(queued, t)
		}
	}
	if len(queued) == 0 {
		return
	}
	var info map[string]core.QueueInfo
	if qe, ok := s.ctl.(QueueExplainer); ok {
		info = qe.Explain(ctx, queued)
	} else {
		info = s.explainFallback(ctx)
	}
	for i := range ts {
		if ts[i].Status != core.StatusQueued {
			continue
		}
		if qi, ok := info[ts[i].ID]; ok {
			ts[i].QueuePosition, ts[i].PendingReason = qi.Position, qi.Reason
		}
	}
}

// capacityView is what a connected worker has free, as the scheduler sees it.
type capacityView struct {
	freeGPUs  int
	totalGPUs int
	freeSlots int
}

// explainFallback replays one scheduling pass over the store's queue order
// (highest priority first, then oldest; smaller runs may backfill past a run
// that does not fit) against the workers' free GPUs and CPU slots.
func (s *Server) explainFallback(ctx context.Context) map[string]core.QueueInfo {
	queue, err := s.st.QueuedTasks(ctx, maxExplainedQueue)
	if err != nil {
		return nil
	}
	var caps []capacityView
	maxTotal := 0
	for _, w := range s.ctl.Workers() {
		if w.State != core.WorkerIdle && w.State != core.WorkerRunning {
			continue
		}
		c := capacityView{totalGPUs: len(w.GPUs), freeSlots: w.Slots}
		onGPU := map[string]bool{}
		for _, g := range w.GPUs {
			if g.TaskID == "" {
				c.freeGPUs++
			} else {
				onGPU[g.TaskID] = true
			}
		}
		for _, id := range w.RunningTasks {
			if !onGPU[id] {
				c.freeSlots--
			}
		}
		c.freeSlots = max(c.freeSlots, 0)
		maxTotal = max(maxTotal, c.totalGPUs)
		caps = append(caps, c)
	}
	// The largest free block now, before the runs ahead take theirs.
	initialLargest := 0
	for _, c := range caps {
		initialLargest = max(initialLargest, c.freeGPUs)
	}
	out := make(map[string]core.QueueInfo, len(queue))
	ahead := 0
	for i, t := range queue {
		qi := core.QueueInfo{Position: i + 1}
		switch {
		case len(caps) == 0:
			qi.Reason = "no worker is connected"
		case t.GPUs > maxTotal:
			qi.Reason = fmt.Sprintf("needs %d GPUs, but the largest worker has %d", t.GPUs, maxTotal)
		case t.GPUs > 0:
			best := -1
			for j, c := range caps {
				if c.freeGPUs >= t.GPUs && (best < 0 || c.freeGPUs < caps[best].freeGPUs) {
					best = j
				}
			}
			if best >= 0 {
				caps[best].freeGPUs -= t.GPUs
				qi.Reason = "starting: a worker has the GPUs free"
			} else if t.GPUs <= initialLargest {
				qi.Reason = fmt.Sprintf("needs %d GPU%s; runs ahead of it take the free ones", t.GPUs, plural(t.GPUs))
			} else {
				qi.Reason = fmt.Sprintf("needs %d GPU%s, the largest free block is %d", t.GPUs, plural(t.GPUs), initialLargest)
			}
		default:
			best := -1
			for j, c := range caps {
				if c.freeSlots > 0 && (best < 0 || c.freeSlots > caps[best].freeSlots) {
					best = j
				}
			}
			if best >= 0 {
				caps[best].freeSlots--
				qi.Reason = "starting: a worker has a free CPU slot"
			} else if ahead > 0 {
				qi.Reason = fmt.Sprintf("waits for a free CPU slot; %d queued ahead of it", ahead)
			} else {
				qi.Reason = "waits for a free CPU slot: every slot is busy"
			}
		}
		ahead++
		out[t.ID] = qi
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
