package storetest

import (
	"slices"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testDependencies: a run created with after is stored waiting with its
// edges, is never in QueuedTasks' window, is found from each parent and
// decided as its parents end, and is released by ReleaseWaiting only once.
func testDependencies(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "p1", 0, at(0))
	mustTask(t, s, u, "p2", 0, at(1))
	child := core.Task{ID: "c1", Name: "child", UserID: u.ID, CreatedAt: at(2),
		After:      []core.Dep{{Run: "p1", When: core.WhenSucceeded}, {Run: "p2", When: core.WhenEnded, Sweep: "sw"}},
		InputsFrom: []string{"p1"}}
	if err := s.CreateTask(ctx, &child); err != nil {
		t.Fatalf("CreateTask(child): %v", err)
	}
	if !child.Waiting {
		t.Fatalf("created child not waiting")
	}
	got := mustGet(t, s, "c1")
	if !got.Waiting || got.Status != core.StatusQueued || !slices.Equal(got.InputsFrom, []string{"p1"}) ||
		len(got.After) != 2 || got.After[1] != (core.Dep{Run: "p2", When: core.WhenEnded, Sweep: "sw"}) {
		t.Fatalf("child read back: waiting %v status %s after %+v inputsFrom %v", got.Waiting, got.Status, got.After, got.InputsFrom)
	}
	if p := mustGet(t, s, "p1"); p.Waiting || p.After != nil {
		t.Fatalf("parent read back waiting %v after %v", p.Waiting, p.After)
	}
	q, err := s.QueuedTasks(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	checkIDs(t, "queue with a waiting child", q, []string{"p1", "p2"})

	for _, p := range []string{"p1", "p2"} {
		kids, err := s.WaitingChildren(ctx, p)
		if err != nil || !slices.Equal(kids, []string{"c1"}) {
			t.Fatalf("WaitingChildren(%s) = %v, %v", p, kids, err)
		}
	}
	// Several parents at once (the runs of one group commit): each child once.
	if kids, err := s.WaitingChildren(ctx, "p1", "p2", "p-missing", "p1"); err != nil || !slices.Equal(kids, []string{"c1"}) {
		t.Fatalf("WaitingChildren(p1, p2, p-missing, p1) = %v, %v", kids, err)
	}
	if kids, err := s.WaitingChildren(ctx); err != nil || len(kids) != 0 {
		t.Fatalf("WaitingChildren() = %v, %v", kids, err)
	}
	ps, err := s.Parents(ctx, []string{"c1", "p1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []core.ParentState{{Parent: "p1", When: "succeeded", Status: core.StatusQueued}, {Parent: "p2", When: "ended", Status: core.StatusQueued}}
	if !slices.Equal(ps["c1"], want) || len(ps) != 1 {
		t.Fatalf("Parents = %+v, want c1: %+v", ps, want)
	}
	dec, err := s.DecidableWaiting(ctx, 10)
	if err != nil || len(dec) != 0 {
		t.Fatalf("DecidableWaiting before any end = %v, %v", dec, err)
	}
	end(t, s, "p1", core.StatusSucceeded, 1)
	if dec, _ = s.DecidableWaiting(ctx, 10); len(dec) != 0 {
		t.Fatalf("DecidableWaiting with p2 going = %v", dec)
	}
	end(t, s, "p2", core.StatusFailed, 2)
	if dec, _ = s.DecidableWaiting(ctx, 10); !slices.Equal(dec, []string{"c1"}) {
		t.Fatalf("DecidableWaiting with both ended = %v", dec)
	}
	n, err := s.ReleaseWaiting(ctx, []string{"c1", "p1", "nope"})
	if err != nil || n != 1 {
		t.Fatalf("ReleaseWaiting = %d, %v; want 1", n, err)
	}
	if n, _ := s.ReleaseWaiting(ctx, []string{"c1"}); n != 0 {
		t.Fatalf("second ReleaseWaiting = %d", n)
	}
	if q, _ = s.QueuedTasks(ctx, 10); !slices.Equal(ids(q), []string{"c1"}) {
		t.Fatalf("queue after release = %v", ids(q))
	}
	if kids, _ := s.WaitingChildren(ctx, "p1"); len(kids) != 0 {
		t.Fatalf("WaitingChildren after release = %v", kids)
	}

	// A failed condition is decidable while other parents still run; a
	// missing parent fails every condition.
	mustTask(t, s, u, "p3", 0, at(3))
	c2 := core.Task{ID: "c2", UserID: u.ID, CreatedAt: at(4), After: []core.Dep{{Run: "p2", When: core.WhenSucceeded}, {Run: "p3", When: core.WhenSucceeded}}}
	c3 := core.Task{ID: "c3", UserID: u.ID, CreatedAt: at(5), After: []core.Dep{{Run: "ghost", When: core.WhenEnded}, {Run: "p3", When: core.WhenEnded}}}
	c4 := core.Task{ID: "c4", UserID: u.ID, CreatedAt: at(6), After: []core.Dep{{Run: "p3", When: core.WhenFailed}}}
	for i, err := range s.CreateTasks(ctx, []*core.Task{&c2, &c3, &c4}) {
		if err != nil {
			t.Fatalf("CreateTasks[%d]: %v", i, err)
		}
	}
	if dec, _ = s.DecidableWaiting(ctx, 10); !slices.Equal(dec, []string{"c2", "c3"}) {
		t.Fatalf("DecidableWaiting = %v, want c2 (p2 failed) and c3 (ghost)", dec)
	}
	if dec, _ = s.DecidableWaiting(ctx, 1); len(dec) != 1 {
		t.Fatalf("DecidableWaiting limit 1 = %v", dec)
	}
	ps, _ = s.Parents(ctx, []string{"c3"})
	if len(ps["c3"]) != 2 || ps["c3"][0] != (core.ParentState{Parent: "ghost", When: "ended"}) {
		t.Fatalf("Parents(c3) = %+v", ps["c3"])
	}
	if ok, failed, _ := core.DepVerdict(ps["c3"]); ok || failed == nil || failed.Parent != "ghost" {
		t.Fatalf("verdict of c3: ok %v failed %+v", ok, failed)
	}
	// A cancelled waiting run is neither a waiting child nor decidable.
	mustMove(t, s, "c2", core.StatusCancelled, 0)
	if kids, _ := s.WaitingChildren(ctx, "p3"); !slices.Equal(kids, []string{"c3", "c4"}) {
		t.Fatalf("WaitingChildren(p3) = %v", kids)
	}

	// A sweep's members may wait too, their edges in the sweep's transaction.
	sw, members := newSweep("sw1", u, 2, 0)
	for _, m := range members {
		m.After = []core.Dep{{Run: "p3", When: core.WhenSucceeded}}
	}
	if err := s.CreateSweep(ctx, sw, members); err != nil {
		t.Fatal(err)
	}
	if kids, _ := s.WaitingChildren(ctx, "p3"); len(kids) != 4 {
		t.Fatalf("WaitingChildren(p3) with the sweep = %v", kids)
	}

	// Bad after: refused, nothing written.
	bad := []core.Task{
		{ID: "b1", UserID: u.ID, After: []core.Dep{{Run: "b1", When: "ended"}}},
		{ID: "b2", UserID: u.ID, After: []core.Dep{{Run: "p1", When: "sometimes"}}},
		{ID: "b3", UserID: u.ID, After: []core.Dep{{Run: "p1", When: "ended"}, {Run: "p1", When: "ended"}}},
		{ID: "b4", UserID: u.ID, InputsFrom: []string{"../x"}},
	}
	for i := range bad {
		if err := s.CreateTask(ctx, &bad[i]); err == nil {
			t.Fatalf("CreateTask(%s) with bad deps: nil error", bad[i].ID)
		}
	}
}
