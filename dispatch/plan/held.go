package plan

import "github.com/rlsched/rlsched/core"

// Held reports which runs of queue, once placed have started, wait for
// their owner's quota (quota.go) or their sweep's cap (sweeplimit.go): the
// same gates Plan applies, counting the runs in flight and those placed,
// so no capacity freed for them (a preemption) would start them. placed is
// what Place or Plan returned for s and queue; runs placed or in flight are
// never held. Nil when none is.
func Held(s Snapshot, queue []core.Task, placed []Placement) map[string]bool {
	sweep, quota := newSweepGate(s, queue), newQuotaGate(s, queue)
	started := make(map[string]bool, len(placed))
	for _, p := range placed {
		sweep.take(p.Task)
		quota.take(p.Task)
		started[p.Task.ID] = true
	}
	var held map[string]bool
	for i := range queue {
		t := &queue[i]
		if _, ok := s.InFlight[t.ID]; ok || started[t.ID] {
			continue
		}
		if sweep.full(t) || quota.full(t) {
			if held == nil {
				held = map[string]bool{}
			}
			held[t.ID] = true
		}
	}
	return held
}

// Waiting is what preemption serves of queue after a plan placed placed:
// its runs asking for GPUs, cores or memory that did not start and that
// only those hold back (not in flight, not Held), in queue order. The master's preempter and rlsched
// sim both ask it, so what is simulated is what the master preempts for.
func Waiting(s Snapshot, queue []core.Task, placed []Placement) []*core.Task {
	started := make(map[string]bool, len(placed))
	for _, p := range placed {
		started[p.Task.ID] = true
	}
	held := Held(s, queue, placed)
	var waiting []*core.Task
	for i := range queue {
		t := &queue[i]
		if cpu, mem := need(t); t.GPUs == 0 && cpu == 0 && mem == 0 || started[t.ID] || s.InFlight[t.ID] != "" || held[t.ID] {
			continue
		}
		waiting = append(waiting, t)
	}
	return waiting
}
