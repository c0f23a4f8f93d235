package storetest

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// SetPriority changes a QUEUED run's priority, and with it its place in
// QueuedTasks; a run that left the queue is core.ErrConflict, an unknown
// one core.ErrNotFound.
func testSetPriority(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	got, err := s.SetPriority(t.Context(), "r2", 7)
	if err != nil || got.ID != "r2" || got.Priority != 7 {
		t.Fatalf("SetPriority(r2, 7): %+v, %v", got, err)
	}
	q, err := s.QueuedTasks(t.Context(), 10)
	if err != nil || len(q) != 2 || q[0].ID != "r2" || q[0].Priority != 7 {
		t.Fatalf("queue after raising r2: %v, %v", ids(q), err)
	}
	if _, err := s.SetPriority(t.Context(), "nope", 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetPriority of an unknown run: %v, want ErrNotFound", err)
	}
	mustMove(t, s, "r1", core.StatusRunning, 3)
	if _, err := s.SetPriority(t.Context(), "r1", 1); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("SetPriority of a RUNNING run: %v, want ErrConflict", err)
	}
	if tk := mustGet(t, s, "r1"); tk.Priority != 0 || tk.Status != core.StatusRunning {
		t.Fatalf("refused SetPriority changed the run: %+v", tk)
	}
}

// usageOf finds a user's row of Usage.
func usageOf(t *testing.T, s store.Store, now time.Time, halfLife time.Duration, name string) store.UserUsage {
	t.Helper()
	us, err := s.Usage(t.Context(), now, halfLife)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	for _, u := range us {
		if u.User == name {
			return u
		}
	}
	t.Fatalf("Usage has no row of %s: %+v", name, us)
	return store.UserUsage{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

// AddUsage decays with the half-life whatever order charges arrive in;
// Usage adds the active runs' time so far and counts their GPUs and runs.
func testUsage(t *testing.T, s store.Store) {
	const h = time.Hour
	alice := mustUser(t, s, "alice")
	bob := mustUser(t, s, "bob")
	if u := usageOf(t, s, at(0), h, "bob"); u.Usage != 0 || u.ActiveGPUs != 0 || u.ActiveRuns != 0 ||
		u.Quota.GPUs != nil || u.Quota.Runs != nil {
		t.Fatalf("a new user's standing: %+v", u)
	}
	cs := []store.UsageCharge{
		{UserID: alice.ID, GPUSeconds: 800, At: at(h)},
		{UserID: alice.ID, GPUSeconds: 400, At: at(0)}, // arrives late: added decayed
		{UserID: 999999, GPUSeconds: 5, At: at(0)},     // unknown: dropped
		{UserID: bob.ID, GPUSeconds: -3, At: at(0)},    // not a use
	}
	if err := s.AddUsage(t.Context(), cs, h); err != nil {
		t.Fatalf("AddUsage: %v", err)
	}
	// At h: 800 + 400/2 = 1000; one half-life later 500.
	if u := usageOf(t, s, at(h), h, "alice"); !near(u.Usage, 1000) {
		t.Fatalf("alice at h: %v, want 1000", u.Usage)
	}
	if u := usageOf(t, s, at(2*h), h, "alice"); !near(u.Usage, 500) {
		t.Fatalf("alice at 2h: %v, want 500", u.Usage)
	}
	if u := usageOf(t, s, at(2*h), h, "bob"); u.Usage != 0 {
		t.Fatalf("bob after a negative charge: %v", u.Usage)
	}
	// Active runs: a 2-GPU run started at 2h, a CPU run of 3 cores started
	// at 2h (weighted by its cores), a DISPATCHED one not started yet, a
	// quarter of a GPU started at 2h (counted a quarter; a whole GPU of
	// the quota's, rounded up).
	for i, g := range []int{2, 0, 1, -1} {
		id := fmt.Sprint("b", i)
		tk := core.Task{ID: id, UserID: bob.ID, GPUs: max(g, 0), Command: []string{"x"}, CreatedAt: at(0)}
		if g == 0 {
			tk.CPUs = 3
		}
		if g < 0 {
			tk.GPUFraction = 0.25
		}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatal(err)
		}
		exp := store.Expect{Fence: 0, Status: core.StatusQueued}
		tk.Status, tk.Fence = core.StatusDispatched, uint64(i+1)
		if i != 2 {
			st := at(2 * h)
			tk.Status, tk.StartedAt = core.StatusRunning, &st
		}
		if err := s.UpdateTask(t.Context(), &tk, exp); err != nil {
			t.Fatal(err)
		}
	}
	u := usageOf(t, s, at(2*h+100*time.Second), h, "bob")
	if want := 2*100 + 3*core.CPURunWeight*100 + 0.25*100; !near(u.Usage, want) || u.ActiveGPUs != 4 || u.ActiveRuns != 4 {
		t.Fatalf("bob with runs going: %+v, want usage %v, 4 GPUs, 4 runs", u, want)
	}
	// A 2-node group of 3 GPUs a member running 100 s: 6 GPUs active, both
	// members' GPU-seconds.
	dan := mustUser(t, s, "dan")
	g := core.Task{ID: "g0", UserID: dan.ID, GPUs: 3, Nodes: 2, Command: []string{"x"}, CreatedAt: at(0)}
	if err := s.CreateTask(t.Context(), &g); err != nil {
		t.Fatal(err)
	}
	gst := at(2 * h)
	g.Status, g.Fence, g.StartedAt = core.StatusRunning, 1, &gst
	if err := s.UpdateTask(t.Context(), &g, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s, at(2*h+100*time.Second), h, "dan"); !near(u.Usage, 600) || u.ActiveGPUs != 6 || u.ActiveRuns != 1 {
		t.Fatalf("dan with a 2-node group going: %+v, want usage 600, 6 GPUs, 1 run", u)
	}
}

// The Accruing decorator charges a run's owner when it leaves DISPATCHED or
// RUNNING, once, with its GPUs × its time running.
func testAccruing(t *testing.T, s store.Store) {
	const h = time.Hour
	acc := store.Accruing(s, h)
	alice := mustUser(t, s, "alice")
	tk := core.Task{ID: "r1", UserID: alice.ID, GPUs: 2, Command: []string{"x"}, CreatedAt: at(0)}
	if err := acc.CreateTask(t.Context(), &tk); err != nil {
		t.Fatal(err)
	}
	mustMove(t, acc, "r1", core.StatusDispatched, 1)
	r := mustGet(t, acc, "r1")
	st, end := at(0), at(300*time.Second)
	r.Status, r.StartedAt = core.StatusRunning, &st
	if err := acc.UpdateTask(t.Context(), &r, store.Expect{Fence: 1, Status: core.StatusDispatched}); err != nil {
		t.Fatal(err)
	}
	r.Status, r.FinishedAt = core.StatusSucceeded, &end
	errs := acc.UpdateTasks(t.Context(), []store.Update{{Task: &r, Expect: store.Expect{Fence: 1, Status: core.StatusRunning}}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if u := usageOf(t, s, end, h, "alice"); !near(u.Usage, 600) || u.ActiveRuns != 0 {
		t.Fatalf("after a 2-GPU run of 300 s: %+v, want usage 600", u)
	}
	// A refused write charges nothing.
	acc.UpdateTasks(t.Context(), []store.Update{{Task: &r, Expect: store.Expect{Fence: 1, Status: core.StatusRunning}}})
	if u := usageOf(t, s, end, h, "alice"); !near(u.Usage, 600) {
		t.Fatalf("a fenced-off write charged: %v", u.Usage)
	}

	// One batch ending several runs of two users, one of its rows fenced
	// off: each user is charged what their applied rows ran, decayed to
	// its own instant, in the batch's one transaction.
	bob := mustUser(t, s, "bob")
	var us []store.Update
	for i, owner := range []core.User{alice, bob, alice, bob} {
		id := fmt.Sprintf("b%d", i)
		tk := core.Task{ID: id, UserID: owner.ID, GPUs: 1, Command: []string{"x"}, CreatedAt: at(0)}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatal(err)
		}
		r := mustMove(t, s, id, core.StatusDispatched, 1)
		st, end := at(0), at(time.Duration(i+1)*h)
		r.Status, r.StartedAt, r.FinishedAt = core.StatusSucceeded, &st, &end
		exp := store.Expect{Fence: 1, Status: core.StatusDispatched}
		if i == 3 {
			exp.Fence = 7 // bob's second run: fenced off, charges nothing
		}
		us = append(us, store.Update{Task: &r, Expect: exp})
	}
	errs = acc.UpdateTasks(t.Context(), us)
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], core.ErrFenced) {
		t.Fatalf("batch results: %v", errs)
	}
	// alice: 600 GPU-s at 300 s, 1 h of GPU at 1 h, 3 h at 3 h; seen at 3 h.
	wantAlice := core.Decay(600, 3*h-300*time.Second, h) + core.Decay(3600, 2*h, h) + 3*3600
	if u := usageOf(t, s, at(3*h), h, "alice"); !near(u.Usage, wantAlice) {
		t.Fatalf("alice after the batch: %v, want %v", u.Usage, wantAlice)
	}
	if u := usageOf(t, s, at(2*h), h, "bob"); !near(u.Usage, 2*3600) {
		t.Fatalf("bob after the batch: %v, want %v (his fenced-off run uncharged)", u.Usage, 2*3600)
	}

	// A 2-node group of 1 GPU a member, 100 s: each member's GPU charged.
	carol := mustUser(t, s, "carol")
	g := core.Task{ID: "g1", UserID: carol.ID, GPUs: 1, Nodes: 2, Command: []string{"x"}, CreatedAt: at(0)}
	if err := acc.CreateTask(t.Context(), &g); err != nil {
		t.Fatal(err)
	}
	gr := mustMove(t, acc, "g1", core.StatusDispatched, 1)
	gst, gend := at(0), at(100*time.Second)
	gr.Status, gr.StartedAt, gr.FinishedAt = core.StatusSucceeded, &gst, &gend
	if err := acc.UpdateTask(t.Context(), &gr, store.Expect{Fence: 1, Status: core.StatusDispatched}); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s, gend, h, "carol"); !near(u.Usage, 200) {
		t.Fatalf("carol after a 2-node group of 1 GPU for 100 s: %v, want 200", u.Usage)
	}
}

// SetQuota replaces a user's quota; nil fields are no cap; unknown users
// are core.ErrNotFound.
func testQuotas(t *testing.T, s store.Store) {
	alice := mustUser(t, s, "alice")
	two, five := 2, 5
	if err := s.SetQuota(t.Context(), alice.ID, core.Quota{GPUs: &two, Runs: &five}); err != nil {
		t.Fatalf("SetQuota: %v", err)
	}
	u := usageOf(t, s, at(0), time.Hour, "alice")
	if u.Quota.GPUs == nil || *u.Quota.GPUs != 2 || u.Quota.Runs == nil || *u.Quota.Runs != 5 {
		t.Fatalf("quota after set: %+v", u.Quota)
	}
	if err := s.SetQuota(t.Context(), alice.ID, core.Quota{Runs: &two}); err != nil {
		t.Fatalf("SetQuota again: %v", err)
	}
	u = usageOf(t, s, at(0), time.Hour, "alice")
	if u.Quota.GPUs != nil || u.Quota.Runs == nil || *u.Quota.Runs != 2 {
		t.Fatalf("quota after replacing: %+v", u.Quota)
	}
	if err := s.SetQuota(t.Context(), 999999, core.Quota{}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetQuota of an unknown user: %v, want ErrNotFound", err)
	}
}

// A run's preemption settings are kept from creation; a preemption
// (core.Task.Preempt) writes its count and time, and requeues it.
func testPreemptionFields(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	tk := core.Task{ID: "p1", UserID: u.ID, GPUs: 1, Command: []string{"x"}, CreatedAt: at(0), MaxRetries: 0, Attempt: 1,
		Preemptible: true, PreemptGraceSeconds: 60}
	if err := s.CreateTask(t.Context(), &tk); err != nil {
		t.Fatal(err)
	}
	r := mustMove(t, s, "p1", core.StatusRunning, 5)
	exp := store.Expect{Fence: 5, Status: core.StatusRunning}
	if err := r.Preempt("preempted by q1 (priority 10)", at(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateTask(t.Context(), &r, exp); err != nil {
		t.Fatalf("UpdateTask of a preemption: %v", err)
	}
	got := mustGet(t, s, "p1")
	if !got.Preemptible || got.PreemptGraceSeconds != 60 || got.Preemptions != 1 || got.PreemptedAt == nil ||
		!got.PreemptedAt.Equal(at(time.Minute)) || got.Status != core.StatusQueued || got.Attempt != 2 {
		t.Fatalf("after a preemption: %+v", got)
	}
	if q, err := s.QueuedTasks(t.Context(), 5); err != nil || len(q) != 1 || q[0].Preemptions != 1 || !q[0].Preemptible {
		t.Fatalf("queue after a preemption: %+v, %v", q, err)
	}
}
