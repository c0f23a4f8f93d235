package plan

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

// Held is the plan's own verdict: a run Plan leaves waiting for its quota
// or its sweep's cap is held, any other run left queued that some worker
// could fit is not, and placed or in-flight runs never are.
func TestHeldAgreesWithPlan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := farm(t)
		q := queue(t, &s)
		s.Users = users(t, q)
		s.Sweeps = map[string]core.SweepLimit{}
		for i := range 2 {
			max := rapid.IntRange(1, 4).Draw(t, "max")
			s.Sweeps[fmt.Sprintf("s%d", i)] = core.SweepLimit{MaxParallel: max, Active: rapid.IntRange(0, max).Draw(t, "active")}
		}
		for i := range q {
			if k := rapid.IntRange(0, 3).Draw(t, "sweep"); k < 3 {
				q[i].SweepID = fmt.Sprintf("s%d", k) // s2 has no cap
			}
		}
		res := Plan(clone(s), q)
		held := Held(s, q, res.Placements)
		placed := map[string]bool{}
		for _, p := range res.Placements {
			placed[p.Task.ID] = true
		}
		for _, r := range q {
			_, inFlight := s.InFlight[r.ID]
			w := res.Waiting[r.ID]
			switch {
			case placed[r.ID] || inFlight:
				if held[r.ID] {
					t.Fatalf("%s is placed or in flight, yet held", r.ID)
				}
			case w.Code == CodeQuota || w.Code == CodeSweepLimit:
				if !held[r.ID] {
					t.Fatalf("%s waits (%s: %s), yet not held", r.ID, w.Code, w.Reason)
				}
			case w.Code != CodeNoWorker && held[r.ID]:
				t.Fatalf("%s waits (%s: %s), yet held", r.ID, w.Code, w.Reason)
			}
		}
	})
}
