package plan

import (
	"cmp"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Preemption (API.md "Scheduling policy"): a QUEUED run that fits nowhere
// for want of GPUs, cores or memory may have preemptible runs of lower
// priority stopped for it. The
// choice is a pure decision, like placement: Preempt picks the victims, the
// caller stops them (SIGTERM, the victim's grace, SIGKILL) and requeues
// them; the preemptor then starts on what they free.

// Active is an active run the planner may preempt: where it runs and what
// decides whether and in which order it may be stopped.
type Active struct {
	ID     string
	Worker string
	GPUs   int
	// CPUMillis and MemoryMB are the cores (thousandths) and MiB it holds.
	CPUMillis, MemoryMB int64
	Priority            int
	Preemptible         bool
	// Interactive: a session (core.KindInteractive); InteractiveOverBatch
	// never takes one as a victim.
	Interactive bool
	StartedAt   time.Time
	// PreemptedAt is when it was last preempted (zero: never); a run
	// preempted at or after PreemptInput.CooldownSince is spared, so two
	// priorities never ping-pong.
	PreemptedAt time.Time
}

// Node is one connected worker as preemption sees it: its free GPUs,
// cores and memory (Unlimited when it reports none), and its active runs.
type Node struct {
	ID                          string
	FreeGPUs                    int
	FreeCPUMillis, FreeMemoryMB int64
	Runs                        []Active
}

// Preemption stops Victims (run ids, in the order to stop them) on Worker
// so that For, which fits nowhere now, starts there.
type Preemption struct {
	For     *core.Task
	Worker  string
	Victims []string
}

// PreemptInput is what Preempt decides from, read-only.
type PreemptInput struct {
	Nodes []Node
	// Waiting are the QUEUED runs that did not start in this pass, in
	// serving order (the rest of Plan's work: runs held by quota, sweep
	// limits or a reservation of their own should be left out by the
	// caller, as should runs that fit now).
	Waiting []*core.Task
	// CooldownSince: a run preempted at or after it is not preempted again
	// (now − PREEMPT_COOLDOWN_SECONDS).
	CooldownSince time.Time
	// Max bounds the preemptions of one decision (0: 1).
	Max int
	// InteractiveOverBatch (INTERACTIVE_PREEMPTS, issue 34): a waiting
	// interactive run may also preempt preemptible batch runs of its own
	// priority, not only of lower ones; sessions are never its victims.
	InteractiveOverBatch bool
}

// Preempt chooses, for the waiting runs in order, victims that free enough
// GPUs, cores and memory on one worker, each victim freeing some of what
// is still missing: only preemptible runs of lower priority than the run
// waiting, not in their cooldown, lowest priority first, then the most
// recently started; among workers, the one whose victims are fewest, then
// of the lowest priority, then the first by id. A run is a victim once;
// what is freed for one waiting run is not counted for another.
func Preempt(in PreemptInput) []Preemption {
	limit := max(in.Max, 1)
	taken := map[string]bool{}
	used := map[string]bool{} // workers already preempted on for a run of this decision
	var out []Preemption
	for _, t := range in.Waiting {
		if len(out) >= limit {
			break
		}
		if cpu, mem := need(t); t.GPUs == 0 && cpu == 0 && mem == 0 {
			continue
		}
		best, bestVictims, bestTop := "", []string(nil), 0
		for _, n := range in.Nodes {
			if used[n.ID] {
				continue
			}
			victims, top, ok := victimsOn(n, t, taken, in.CooldownSince, in.InteractiveOverBatch)
			if !ok {
				continue
			}
			if best == "" || len(victims) < len(bestVictims) || (len(victims) == len(bestVictims) && top < bestTop) ||
				(len(victims) == len(bestVictims) && top == bestTop && n.ID < best) {
				best, bestVictims, bestTop = n.ID, victims, top
			}
		}
		if best == "" {
			continue
		}
		for _, v := range bestVictims {
			taken[v] = true
		}
		used[best] = true
		out = append(out, Preemption{For: t, Worker: best, Victims: bestVictims})
	}
	return out
}

// victimsOn is the victims n would lose for t (top: the highest priority
// among them), or ok false when n cannot free enough for t, or fits it
// already (then t needs no preemption there).
func victimsOn(n Node, t *core.Task, taken map[string]bool, cooldownSince time.Time, interactiveOverBatch bool) (victims []string, top int, ok bool) {
	gpus, cpu, mem := n.FreeGPUs, n.FreeCPUMillis, n.FreeMemoryMB
	wantCPU, wantMem := need(t)
	fits := func() bool { return gpus >= t.GPUs && cpu >= wantCPU && mem >= wantMem }
	if fits() {
		return nil, 0, false
	}
	session := interactiveOverBatch && t.Kind == core.KindInteractive
	var cands []Active
	for _, r := range n.Runs {
		below := r.Priority < t.Priority || session && !r.Interactive && r.Priority == t.Priority
		if r.Preemptible && below && !taken[r.ID] &&
			(r.PreemptedAt.IsZero() || r.PreemptedAt.Before(cooldownSince)) {
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b Active) int {
		if a.Priority != b.Priority {
			return cmp.Compare(a.Priority, b.Priority)
		}
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c // most recently started first
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, r := range cands {
		// A victim frees some of what t still lacks, or it is spared.
		if !(gpus < t.GPUs && r.GPUs > 0 || cpu < wantCPU && r.CPUMillis > 0 || mem < wantMem && r.MemoryMB > 0) {
			continue
		}
		victims = append(victims, r.ID)
		top = r.Priority // the candidates come lowest priority first
		gpus, cpu, mem = gpus+r.GPUs, cpu+r.CPUMillis, mem+r.MemoryMB
		if fits() {
			return victims, top, true
		}
	}
	return nil, 0, false
}
