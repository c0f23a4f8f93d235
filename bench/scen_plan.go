package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// runPlan times one pass of the planner (dispatch/plan) in this process
// over the issue 15 snapshot: 100,000 queued runs of 1,000 users needing
// 1–4 GPUs, 2,000 workers × 8 GPUs with half of them busy, fair share on
// and a tenth of the users under a GPU quota. Beside it, in the same run,
// the naive planner (below) over the same runs and workers.
func runPlan(e *env) (*report, error) {
	runs, users, workers := pick(e, 10_000, 100_000), pick(e, 100, 1_000), pick(e, 200, 2_000)
	repeats := pick(e, 3, 7)
	s, q := planSnapshot(runs, users, workers)
	rep := &report{size: fmt.Sprintf("%s queued runs of %s users on %s workers × 8 GPUs (4 free each), median of %d",
		human(float64(runs)), human(float64(users)), human(float64(workers)), repeats)}

	timeIt := func(name string, f func() int) (time.Duration, int) {
		var ds []time.Duration
		n := 0
		for range repeats {
			t0 := time.Now()
			n = f()
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		d := ds[len(ds)/2]
		e.logf("%s: %v (%d placed)", name, d, n)
		return d, n
	}
	place, placed := timeIt("plan.Place", func() int { return len(plan.Place(s, q)) })
	explain, _ := timeIt("plan.Plan", func() int { return len(plan.Plan(s, q).Placements) })
	fq := fractional(q)
	share, sharePlaced := timeIt("plan.Place, 30% fractional", func() int { return len(plan.Place(s, fq)) })
	naive, naivePlaced := timeIt("naive", func() int { return naivePlan(s, q) })

	t := rep.newTable("One planner pass", "planner", "median", "per queued run", "placed", "ratio to naive")
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.2f µs", float64(d.Nanoseconds())/1e3/float64(runs))
	}
	ratio := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()/naive.Seconds()) }
	t.add("plan.Place: the scheduler's pass (fair share, quotas, sweep limits, reservations, foreign GPUs; no reasons)", ms(place), per(place), human(float64(placed)), ratio(place))
	t.add("plan.Plan: the same and every waiting run's reason and code (GET /api/queue)", ms(explain), per(explain), human(float64(placed)), ratio(explain))
	t.add("plan.Place with 30% of the runs asking for a fraction of a GPU (0.25, 0.5, 0.75; issue 28)", ms(share), per(share), human(float64(sharePlaced)), ratio(share))
	t.add("naive: priority then age, a scan of every worker for each run (best fit), no policy, no reasons", ms(naive), per(naive), human(float64(naivePlaced)), "1.00")
	rep.goal(place <= 20*time.Millisecond, "one planner pass over %s queued runs on %s workers in ≤ 20 ms: %s (Armada: about 20 µs a job; here %s a run)",
		human(float64(runs)), human(float64(workers)), ms(place), per(place))
	rep.goal(share <= 20*time.Millisecond, "the same pass with 30%% of the runs fractional in ≤ 20 ms: %s", ms(share))
	rep.note("In process, on one goroutine: the planner is a pure function of its snapshot (dispatch/plan), so the master's scheduler pays this per pass plus taking the snapshot. The scheduler itself reads a page of the queue (plan.Batch, plan.Deep deep when none fits) rather than all of it; this is the whole queue at once, as GET /api/queue explains it.")
	rep.result = result{metric: "plan_pass_ms", value: float64(place.Microseconds()) / 1e3, unit: "ms", ref: "naive_plan", refValue: float64(naive.Microseconds()) / 1e3}
	return rep, nil
}

// planSnapshot is the shape: users with varied decayed usage, every
// tenth capped at 16 GPUs; runs round-robin over the users.
func planSnapshot(runs, users, workers int) (plan.Snapshot, []core.Task) {
	s := plan.Snapshot{Connected: workers, MaxGPUs: 8, MaxSlots: 4, Users: map[int64]plan.User{}}
	for i := range workers {
		s.Free = append(s.Free, plan.Worker{ID: fmt.Sprintf("w%05d", i), FreeGPUs: []int{4, 5, 6, 7}, FreeSlots: 2, GPUs: 8})
	}
	for u := range int64(users) {
		usr := plan.User{Name: fmt.Sprint("u", u), Usage: float64(u * 37 % 1000), MaxGPUs: -1, MaxRuns: -1}
		if u%10 == 0 {
			usr.MaxGPUs = 16
		}
		s.Users[u] = usr
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := make([]core.Task, runs)
	for i := range q {
		at := base.Add(time.Duration(i) * time.Millisecond)
		q[i] = core.Task{ID: fmt.Sprintf("r%07d", i), UserID: int64(i % users), GPUs: 1 + i%4, Priority: -(i % 3),
			Status: core.StatusQueued, CreatedAt: at, UpdatedAt: at}
	}
	return s, q
}

// fractional is q with 3 runs in 10 asking for a quarter, a half or three
// quarters of a GPU instead of whole GPUs (issue 28's Performance).
func fractional(q []core.Task) []core.Task {
	out := slices.Clone(q)
	for i := range out {
		if i%10 < 3 {
			out[i].GPUs, out[i].GPUFraction = 0, []float64{0.25, 0.5, 0.75}[i%3]
		}
	}
	return out
}

// naivePlan is the textbook loop the planner is measured against: the
// runs by priority then age, and for each a scan of every worker for the
// best fit. It returns how many it placed.
func naivePlan(s plan.Snapshot, queue []core.Task) int {
	order := make([]*core.Task, len(queue))
	for i := range queue {
		order[i] = &queue[i]
	}
	slices.SortStableFunc(order, func(a, b *core.Task) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	free := make([]int, len(s.Free))
	for i, w := range s.Free {
		free[i] = len(w.FreeGPUs)
	}
	placed := 0
	for _, t := range order {
		best := -1
		for i, n := range free {
			if n >= t.GPUs && (best < 0 || n < free[best]) {
				best = i
			}
		}
		if best >= 0 {
			free[best] -= t.GPUs
			placed++
		}
	}
	return placed
}
