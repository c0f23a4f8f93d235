package plan

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

// owned is a queued run of user uid.
func owned(id string, uid int64, gpus, prio int) core.Task {
	t := queued(id, gpus, prio)
	t.UserID, t.User = uid, fmt.Sprint("u", uid)
	return t
}

// Alice's sweep came first, but Bob has used less: at equal priority his
// runs are served first; a higher priority still goes before both.
func TestFairShareOrder(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 2, Free: []Worker{{ID: "w", FreeGPUs: []int{0, 1}}},
		Users: map[int64]User{1: {Name: "alice", Usage: 7200, MaxGPUs: -1, MaxRuns: -1}, 2: {Name: "bob", Usage: 10, MaxGPUs: -1, MaxRuns: -1}}}
	q := []core.Task{owned("a1", 1, 1, 0), owned("a2", 1, 1, 0), owned("a3", 1, 1, 0), owned("b1", 2, 1, 0), owned("urgent", 1, 1, 5)}
	res := Plan(s, q)
	var got []string
	for _, p := range res.Placements {
		got = append(got, p.Task.ID)
	}
	if fmt.Sprint(got) != "[urgent b1]" {
		t.Fatalf("placed %v, want [urgent b1]", got)
	}
	want := map[string]int{"urgent": 1, "b1": 2, "a1": 3, "a2": 4, "a3": 5}
	for id, pos := range want {
		if res.Waiting[id].Position != pos {
			t.Fatalf("%s at %d, want %d (%+v)", id, res.Waiting[id].Position, pos, res.Waiting)
		}
	}
}

func TestQuotaReasons(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 8, MaxSlots: 4, Free: []Worker{{ID: "w", FreeGPUs: []int{0, 1, 2, 3, 4, 5}, FreeSlots: 4}},
		Users: map[int64]User{
			1: {Name: "alice", ActiveGPUs: 1, ActiveRuns: 1, MaxGPUs: 2, MaxRuns: -1},
			2: {Name: "bob", MaxGPUs: -1, MaxRuns: 1},
			3: {Name: "carol", MaxGPUs: -1, MaxRuns: 0},
		}}
	q := []core.Task{owned("a1", 1, 1, 0), owned("a2", 1, 1, 0), owned("a4", 1, 4, 0),
		owned("b1", 2, 0, 0), owned("b2", 2, 0, 0), owned("c1", 3, 0, 0)}
	res := Plan(s, q)
	want := map[string]core.QueueInfo{
		"a1": {Position: 1, Reason: "starting on w"},
		"a2": {Position: 2, Reason: "needs 1 GPU; alice has 2 of a quota of 2 GPUs active", Code: CodeQuota},
		"a4": {Position: 3, Reason: "needs 4 GPUs, more than the quota of alice (2 GPUs): it starts only once an admin raises the quota", Code: CodeQuota},
		"b1": {Position: 4, Reason: "starting on w"},
		"b2": {Position: 5, Reason: "bob has 1 of a quota of 1 active runs", Code: CodeQuota},
		"c1": {Position: 6, Reason: "the quota of carol allows no active runs: it starts only once an admin raises the quota", Code: CodeQuota},
	}
	for id, w := range want {
		if got := res.Waiting[id]; got != w {
			t.Errorf("%s: got %+v\nwant %+v", id, got, w)
		}
	}
}

// users draws up to 4 owners with usages, some with quotas and runs
// active, and gives each run of q one of them.
func users(t *rapid.T, q []core.Task) map[int64]User {
	us := map[int64]User{}
	n := rapid.IntRange(1, 4).Draw(t, "users")
	for i := 1; i <= n; i++ {
		u := User{Name: fmt.Sprint("u", i), Usage: float64(rapid.IntRange(0, 5).Draw(t, "usage")), MaxGPUs: -1, MaxRuns: -1}
		if rapid.Bool().Draw(t, "gpuQuota") {
			u.MaxGPUs = rapid.IntRange(0, 6).Draw(t, "maxGPUs")
		}
		if rapid.Bool().Draw(t, "runQuota") {
			u.MaxRuns = rapid.IntRange(0, 4).Draw(t, "maxRuns")
		}
		u.ActiveGPUs = rapid.IntRange(0, 3).Draw(t, "activeGPUs")
		u.ActiveRuns = rapid.IntRange(0, 2).Draw(t, "activeRuns")
		us[int64(i)] = u
	}
	for i := range q {
		q[i].UserID = int64(rapid.IntRange(1, n).Draw(t, "owner"))
		q[i].Priority = rapid.IntRange(0, 1).Draw(t, "priority")
	}
	return us
}

// No GPU is given twice, no quota is exceeded (a user already over it
// starts nothing), and between runs of equal priority a run of a user with
// less usage is served first: never left waiting for the GPUs while a run
// of a heavier user needing as many or more starts.
func TestPolicyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := farm(t)
		q := queue(t, &s)
		s.Users = users(t, q)
		res := Plan(s, q)

		gpuHolder := map[string]string{}
		got := map[int64]*use{}
		for id, u := range s.Users {
			got[id] = &use{u.ActiveGPUs, u.ActiveRuns}
		}
		for i := range q {
			if _, ok := s.InFlight[q[i].ID]; ok {
				got[q[i].UserID].gpus += q[i].GPUs
				got[q[i].UserID].runs++
			}
		}
		start := map[int64]use{}
		for id, a := range got {
			start[id] = *a
		}
		placed := map[string]bool{}
		for _, p := range res.Placements {
			placed[p.Task.ID] = true
			for _, g := range p.GPUs {
				key := fmt.Sprintf("%s/%d", p.Worker, g)
				if other, ok := gpuHolder[key]; ok {
					t.Fatalf("GPU %s given to %s and %s", key, other, p.Task.ID)
				}
				gpuHolder[key] = p.Task.ID
			}
			u, a := s.Users[p.Task.UserID], got[p.Task.UserID]
			a.gpus += p.Task.GPUs
			a.runs++
			if u.MaxGPUs >= 0 && a.gpus > u.MaxGPUs {
				t.Fatalf("%s takes %s to %d GPUs active, quota %d (from %d)", p.Task.ID, u.Name, a.gpus, u.MaxGPUs, start[p.Task.UserID].gpus)
			}
			if u.MaxRuns >= 0 && a.runs > u.MaxRuns {
				t.Fatalf("%s takes %s to %d runs active, quota %d", p.Task.ID, u.Name, a.runs, u.MaxRuns)
			}
		}
		// Fair share: positions follow (priority desc, usage asc).
		for i := range q {
			a := &q[i]
			qa := res.Waiting[a.ID]
			if qa.Position == 0 {
				continue
			}
			for j := range q {
				b := &q[j]
				qb := res.Waiting[b.ID]
				if qb.Position == 0 || a.Priority != b.Priority {
					continue
				}
				ua, ub := s.Users[a.UserID].Usage, s.Users[b.UserID].Usage
				if ua < ub && qa.Position > qb.Position {
					t.Fatalf("%s (usage %v) at %d behind %s (usage %v) at %d", a.ID, ua, qa.Position, b.ID, ub, qb.Position)
				}
				ca, ma := need(a)
				cb, mb := need(b)
				sameKind := (a.GPUs == 0) == (b.GPUs == 0) && a.GPUs <= b.GPUs && ca <= cb && ma <= mb
				if ua < ub && sameKind && placed[b.ID] && !placed[a.ID] &&
					(qa.Code == CodeResources || qa.Code == CodePriority) {
					t.Fatalf("%s (%d GPUs, usage %v) waits (%q) while %s (%d GPUs, usage %v) starts",
						a.ID, a.GPUs, ua, qa.Reason, b.ID, b.GPUs, ub)
				}
			}
		}
	})
}

// One plan of the scenario: 100,000 queued runs of 1,000 users
// (fair share, a GPU quota for every tenth) on 2,000 workers of 8 GPUs, half
// of them busy.
func BenchmarkPlanPolicy(b *testing.B) {
	s := Snapshot{Connected: 2000, MaxGPUs: 8, MaxSlots: 4, Users: map[int64]User{}}
	for i := range 2000 {
		s.Free = append(s.Free, Worker{ID: fmt.Sprintf("w%04d", i), FreeGPUs: []int{4, 5, 6, 7}, FreeSlots: 2, GPUs: 8})
	}
	for u := range int64(1000) {
		usr := User{Name: fmt.Sprint("u", u), Usage: float64(u * 37 % 1000), MaxGPUs: -1, MaxRuns: -1}
		if u%10 == 0 {
			usr.MaxGPUs = 16
		}
		s.Users[u] = usr
	}
	q := make([]core.Task, 100_000)
	for i := range q {
		q[i] = owned(fmt.Sprintf("r%d", i), int64(i%1000), 1+i%4, i%3)
	}
	b.Run("policy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Plan(s, q)
		}
	})
	b.Run("place", func(b *testing.B) { // the scheduler's pass: no reasons
		b.ReportAllocs()
		for b.Loop() {
			Place(s, q)
		}
	})
	b.Run("place-fractional", func(b *testing.B) { // 30% of the runs a fraction of a GPU (issue 28)
		fq := slices.Clone(q)
		for i := range fq {
			if i%10 < 3 {
				fq[i].GPUs, fq[i].GPUFraction = 0, []float64{0.25, 0.5, 0.75}[i%3]
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			Place(s, fq)
		}
	})
	b.Run("no-users", func(b *testing.B) { // the same without fair share and quotas
		s := s
		s.Users = nil
		b.ReportAllocs()
		for b.Loop() {
			Plan(s, q)
		}
	})
}

// fairOrder's packed integer keys order the runs exactly as the
// comparison sort does (priority, owner's usage, store order), owners
// missing from Users included.
func TestFairOrderCountingSortAgrees(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 60).Draw(t, "runs")
		s := Snapshot{Users: map[int64]User{}, SessionsFirst: rapid.Bool().Draw(t, "sessionsFirst")}
		for u := range int64(rapid.IntRange(1, 6).Draw(t, "users")) {
			s.Users[u] = User{Usage: float64(rapid.IntRange(0, 3).Draw(t, "usage")) / 2}
		}
		q := make([]core.Task, n)
		for i := range q {
			q[i] = owned(fmt.Sprint("r", i), int64(rapid.IntRange(0, 7).Draw(t, "owner")), 1, rapid.IntRange(-2, 2).Draw(t, "prio"))
			if rapid.Bool().Draw(t, "interactive") {
				q[i].Kind = core.KindInteractive
			}
		}
		a, b := make([]*core.Task, n), make([]*core.Task, n)
		for i := range q {
			a[i], b[i] = &q[i], &q[i]
		}
		fairOrder(s, a)
		fairOrderSlow(s, b)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("position %d: the counting sort gives %s, the comparison sort %s", i, a[i].ID, b[i].ID)
			}
		}
	})
}
