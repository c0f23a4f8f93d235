package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testSweepGrow: AddSweepMembers appends members after the last as the
// owner's runs, only while the sweep has the count the caller read; of two
// adding at once exactly one wins, and a loser writes nothing.
func testSweepGrow(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	other := mustUser(t, s, "bob")
	mustSweep(t, s, "s1", u, 2, 2)
	more := func(tag string, n int) []*core.Task {
		_, ts := newSweep("s1", other, n, 0) // another user's id: the store makes them the owner's
		for i, tk := range ts {
			tk.ID = fmt.Sprintf("r-s1-%s-%d", tag, i)
		}
		return ts
	}
	add := more("a", 2)
	if err := s.AddSweepMembers(ctx, "s1", 2, add); err != nil {
		t.Fatal(err)
	}
	if add[0].User != "alice" || add[0].UserID != u.ID || add[0].SweepID != "s1" || add[0].Status != core.StatusQueued {
		t.Fatalf("an added member as returned: %+v", add[0])
	}
	sw, err := s.Sweep(ctx, "s1")
	if err != nil || sw.Members != 4 || sw.Counts[core.StatusQueued] != 4 {
		t.Fatalf("Sweep after adding 2: %+v, %v", sw, err)
	}
	runs, err := s.SweepRuns(ctx, "s1")
	if err != nil || len(runs) != 4 {
		t.Fatalf("SweepRuns: %d, %v", len(runs), err)
	}
	checkTask(t, "member 3", runs[3], *add[1])
	before := countRuns(t, s)
	if err := s.AddSweepMembers(ctx, "s1", 2, more("stale", 1)); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("AddSweepMembers from a stale count: %v, want ErrConflict", err)
	}
	if err := s.AddSweepMembers(ctx, "s-missing", 0, more("missing", 1)); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("AddSweepMembers of an unknown sweep: %v, want ErrNotFound", err)
	}
	if err := s.AddSweepMembers(ctx, "s1", 4, nil); err == nil {
		t.Fatal("AddSweepMembers of no members: no error")
	}
	if n := countRuns(t, s); n != before {
		t.Fatalf("%d runs after refused adds; want %d", n, before)
	}

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.AddSweepMembers(ctx, "s1", 4, more(fmt.Sprint("race", i), 3))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, core.ErrConflict):
			t.Fatalf("a racing AddSweepMembers: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing adds won; want 1 (%v)", won, errs)
	}
	if sw, _ := s.Sweep(ctx, "s1"); sw.Members != 7 || countRuns(t, s) != before+3 {
		t.Fatalf("after the race: %d members, %d runs; want 7, %d", sw.Members, countRuns(t, s), before+3)
	}
}

// testSweepDecisions: a rung decision is kept once by (run, rung): the
// first kept stands, also when two keep at once; they read back by rung,
// then in the order kept, with every field.
func testSweepDecisions(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustSweep(t, s, "s1", u, 3, 0)
	at := time.Unix(1700000000, 0)
	d := func(run string, rung int, v float64, stop bool, i int) store.SweepDecision {
		return store.SweepDecision{TaskID: run, Rung: rung, Step: int64(10 * (rung + 1)), Value: v, Cut: 2.5,
			Peers: 3, Stop: stop, DecidedAt: at.Add(time.Duration(i))}
	}
	if ds, err := s.SweepDecisions(ctx, "s1"); err != nil || len(ds) != 0 {
		t.Fatalf("SweepDecisions of a sweep without any: %v, %v", ds, err)
	}
	if err := s.KeepSweepDecisions(ctx, "s1", []store.SweepDecision{d("b", 1, 3, false, 0), d("a", 0, 1.5, true, 1), d("b", 0, -1e300, false, 2)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 { // the same (run, rung) again, with another verdict: ignored
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.KeepSweepDecisions(ctx, "s1", []store.SweepDecision{d("a", 0, 9, false, 10+i), d("c", 0, 4, false, 20)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ds, err := s.SweepDecisions(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SweepDecision{d("a", 0, 1.5, true, 1), d("b", 0, -1e300, false, 2), d("c", 0, 4, false, 20), d("b", 1, 3, false, 0)}
	if len(ds) != len(want) {
		t.Fatalf("SweepDecisions: %+v; want %+v", ds, want)
	}
	for i := range want {
		if !ds[i].DecidedAt.Equal(want[i].DecidedAt) {
			t.Fatalf("decision %d at %v; want %v", i, ds[i].DecidedAt, want[i].DecidedAt)
		}
		ds[i].DecidedAt = want[i].DecidedAt
		if ds[i] != want[i] {
			t.Fatalf("decision %d: %+v; want %+v", i, ds[i], want[i])
		}
	}
	if ds, err := s.SweepDecisions(ctx, "s-other"); err != nil || len(ds) != 0 {
		t.Fatalf("another sweep's: %v, %v", ds, err)
	}
}
