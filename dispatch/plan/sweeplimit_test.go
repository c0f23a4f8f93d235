package plan

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

func member(id, sweep string, gpus int) core.Task {
	t := queued(id, gpus, 0)
	t.SweepID = sweep
	return t
}

// slots is one worker with n free CPU slots.
func slots(n int) Snapshot {
	return Snapshot{Connected: 1, MaxSlots: n, Free: []Worker{{ID: "w", FreeSlots: n}}}
}

func TestSweepLimit(t *testing.T) {
	s := slots(10)
	s.Sweeps = map[string]core.SweepLimit{"s1": {MaxParallel: 2, Active: 1}}
	s.InFlight = map[string]string{"a0": "w"}
	q := []core.Task{member("a0", "s2", 0), member("a1", "s1", 0), member("a2", "s1", 0), queued("x", 0, 0),
		member("a3", "s1", 0), member("b1", "s2", 0), member("b2", "s2", 0)}
	res := Plan(s, q)
	var got []string
	for _, p := range res.Placements {
		got = append(got, p.Task.ID)
	}
	// s1 has one active member and room for one more; s2 has no cap.
	if fmt.Sprint(got) != "[a1 x b1 b2]" {
		t.Fatalf("placed %v, want [a1 x b1 b2]", got)
	}
	for _, id := range []string{"a2", "a3"} {
		want := core.QueueInfo{Position: map[string]int{"a2": 2, "a3": 4}[id], Code: CodeSweepLimit,
			Reason: "its sweep s1 has 2 of at most 2 members running (maxParallel)"}
		if w := res.Waiting[id]; w != want {
			t.Fatalf("%s: %+v, want %+v", id, w, want)
		}
	}
	// A member in flight counts as active.
	s.Sweeps["s1"] = core.SweepLimit{MaxParallel: 2}
	s.InFlight = map[string]string{"a1": "w"}
	got = nil
	for _, p := range Place(s, q) {
		got = append(got, p.Task.ID)
	}
	if fmt.Sprint(got) != "[a0 a2 x b1 b2]" {
		t.Fatalf("with a1 in flight: placed %v, want [a0 a2 x b1 b2]", got)
	}
}

// The cap holds across the scheduler's passes and its deep look: a queue
// of many members on a large farm starts exactly maxParallel of them.
func TestSweepLimitAcrossPasses(t *testing.T) {
	var q []core.Task
	for i := range 3 * Batch {
		q = append(q, member(fmt.Sprintf("m%d", i), "s1", 0))
	}
	s := slots(2 * Batch)
	s.Sweeps = map[string]core.SweepLimit{"s1": {MaxParallel: 5}}
	res := Plan(s, q)
	if len(res.Placements) != 5 {
		t.Fatalf("%d placed, want 5", len(res.Placements))
	}
	if w := res.Waiting[q[len(q)-1].ID]; w.Code != CodeSweepLimit {
		t.Fatalf("the last member: %+v, want %s", w, CodeSweepLimit)
	}
}

// Property: whatever the farm and the queue, no capped sweep ends the plan
// with more active members than its cap (or than it had), and only members
// of capped sweeps wait with sweep_limit.
func TestSweepLimitProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := farm(t)
		q := queue(t, &s)
		s.Sweeps = map[string]core.SweepLimit{}
		for i := range 3 {
			id := fmt.Sprintf("s%d", i)
			max := rapid.IntRange(1, 6).Draw(t, "max")
			s.Sweeps[id] = core.SweepLimit{MaxParallel: max, Active: rapid.IntRange(0, max+1).Draw(t, "active")}
		}
		for i := range q {
			if k := rapid.IntRange(0, 4).Draw(t, "sweep"); k < 4 {
				q[i].SweepID = fmt.Sprintf("s%d", k) // s3 has no cap
			}
		}
		res := Plan(s, q)
		active := map[string]int{}
		for id, l := range s.Sweeps {
			active[id] = l.Active
		}
		for _, t := range q {
			if _, ok := s.InFlight[t.ID]; ok {
				active[t.SweepID]++
			}
		}
		start := map[string]int{}
		for id, n := range active {
			start[id] = n
		}
		for _, p := range res.Placements {
			active[p.Task.SweepID]++
		}
		for id, l := range s.Sweeps {
			if active[id] > max(l.MaxParallel, start[id]) {
				t.Fatalf("sweep %s ends with %d active, cap %d (started at %d)", id, active[id], l.MaxParallel, start[id])
			}
		}
		for _, r := range q {
			w := res.Waiting[r.ID]
			if w.Code == CodeSweepLimit && (r.SweepID == "s3" || r.SweepID == "") {
				t.Fatalf("run %s of sweep %q held by the sweep limit", r.ID, r.SweepID)
			}
		}
	})
}
