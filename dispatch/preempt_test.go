package dispatch

import (
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// Preemption serves exactly the runs the planner says wait for GPUs: one
// the planner holds back for its owner's quota or its sweep's cap, counting
// what the same plan starts and what is in flight, is never preempted for
// (the preemption path once read the store's counts alone, and stopped runs
// for a run the quota then kept queued).
func TestPreemptionWaitsAsThePlannerSays(t *testing.T) {
	run := func(id string, user int64, sweep string, gpus int) core.Task {
		return core.Task{ID: id, UserID: user, SweepID: sweep, GPUs: gpus, Status: core.StatusQueued}
	}
	snap := plan.Snapshot{Connected: 1, MaxGPUs: 8, MaxSlots: 1,
		Free: []plan.Worker{{ID: "w", FreeGPUs: []int{0, 1, 2, 3}, GPUs: 8}},
		// u2's in-flight run fills its quota of one run.
		InFlight: map[string]string{"u2-a": "w"},
		Users: map[int64]plan.User{
			1: {MaxGPUs: 2, MaxRuns: -1},
			2: {MaxGPUs: -1, MaxRuns: 1},
			3: {MaxGPUs: -1, MaxRuns: -1},
		},
		Sweeps: map[string]core.SweepLimit{"s": {MaxParallel: 1}},
	}
	page := []core.Task{
		run("u1-a", 1, "", 2), // starts, filling u1's quota
		run("u1-b", 1, "", 2), // quota
		run("u2-a", 2, "", 1), // in flight
		run("u2-b", 2, "", 1), // quota (the run in flight)
		run("s-a", 3, "s", 1), // starts, filling the sweep
		run("s-b", 3, "s", 1), // sweep_limit
		run("big", 3, "", 4),  // resources: the GPUs preemption frees
	}
	placed := plan.Place(snap, page)
	why := plan.Plan(snap, page).Waiting
	started := map[string]bool{}
	for _, p := range placed {
		started[p.Task.ID] = true
	}
	serves := map[string]bool{}
	for _, t := range plan.Waiting(snap, page, placed) {
		serves[t.ID] = true
	}
	for _, tk := range page {
		code := why[tk.ID].Code
		want := !started[tk.ID] && snap.InFlight[tk.ID] == "" && code != plan.CodeQuota && code != plan.CodeSweepLimit
		if serves[tk.ID] != want {
			t.Errorf("%s (plan: %q, code %q): preemption serves it %v, want %v", tk.ID, why[tk.ID].Reason, code, serves[tk.ID], want)
		}
	}
	if !serves["big"] || serves["u1-b"] || serves["u2-b"] || serves["s-b"] {
		t.Fatalf("preemption serves %v, want only big", serves)
	}
}
