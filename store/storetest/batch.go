package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testCreateTasksMixed: one batch with good rows and rows that fail for
// each reason; the good rows are stored, the bad ones are not and do not
// fail the others.
func testCreateTasksMixed(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r-dup", 0, at(0))
	ts := []*core.Task{
		{ID: "b1", UserID: u.ID, CreatedAt: at(1), Command: []string{"a"}},
		{ID: "r-dup", UserID: u.ID},                                                    // taken before
		{ID: "b2", UserID: u.ID + 1000},                                                // no such owner
		{ID: "bad/id", UserID: u.ID},                                                   // invalid id
		{ID: "b3", UserID: u.ID, Params: json.RawMessage(`{`)},                         // invalid params
		{ID: "", UserID: u.ID, CreatedAt: at(2), Status: core.StatusRunning, Fence: 9}, // id generated; status forced
		{ID: "b1", UserID: u.ID},                                                       // taken earlier in this batch
		{ID: "b4", UserID: u.ID, CreatedAt: at(3)},
	}
	errs := s.CreateTasks(t.Context(), ts)
	if len(errs) != len(ts) {
		t.Fatalf("CreateTasks returned %d errors for %d rows", len(errs), len(ts))
	}
	want := []error{nil, core.ErrConflict, core.ErrNotFound, errAny, errAny, nil, core.ErrConflict, nil}
	for i, w := range want {
		checkErr(t, fmt.Sprintf("row %d (%s)", i, ts[i].ID), errs[i], w)
	}
	for _, i := range []int{0, 5, 7} {
		got := mustGet(t, s, ts[i].ID)
		checkTask(t, "created row "+ts[i].ID, got, *ts[i])
		if got.Status != core.StatusQueued || got.Fence != 0 || got.User != "alice" {
			t.Fatalf("row %s: got %s/%d user %q, want QUEUED/0 alice", got.ID, got.Status, got.Fence, got.User)
		}
	}
	for _, id := range []string{"b2", "b3"} {
		if _, err := s.Task(t.Context(), id); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("failed row %s was stored: %v", id, err)
		}
	}
	if got := mustGet(t, s, "r-dup"); got.CreatedAt.Round(0).UTC() != at(0) {
		t.Fatalf("the conflicting row overwrote r-dup: %+v", got)
	}
	if errs := s.CreateTasks(t.Context(), nil); len(errs) != 0 {
		t.Fatalf("CreateTasks(nil): %v", errs)
	}
}

// testUpdateTasksMixed: one batch of winning, fenced and missing rows, and
// two rows of one run that chain (the second expects the first's write).
func testUpdateTasksMixed(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	for i := range 4 {
		mustTask(t, s, u, fmt.Sprintf("r%d", i), 0, at(0))
	}
	mustMove(t, s, "r2", core.StatusDispatched, 4)
	before2 := mustGet(t, s, "r2")
	r := func(id string) *core.Task { tk := mustGet(t, s, id); return &tk }
	t0, t1, t2, t3, t3b := r("r0"), r("r1"), r("r2"), r("r3"), r("r3")
	t0.Status, t0.Fence, t0.Worker, t0.GPUIndices = core.StatusDispatched, 7, "w0", []int{1, 0}
	t1.Status, t1.Fence = core.StatusDispatched, 8
	t2.Status, t2.Fence = core.StatusRunning, 5 // expects a stale state below
	missing := &core.Task{ID: "r-missing", Status: core.StatusRunning, Fence: 1}
	t3.Status, t3.Fence = core.StatusDispatched, 9
	t3b.Status, t3b.Fence, t3b.Worker = core.StatusRunning, 9, "w3"
	bad := *r("r1")
	bad.Status = "NOPE"
	us := []store.Update{
		{Task: t0, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}},
		{Task: t2, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}}, // fenced
		{Task: missing, Expect: store.Expect{Fence: 0, Status: core.StatusDispatched}},
		{Task: &bad, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}}, // invalid
		{Task: t1, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}},
		{Task: t3, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}},
		{Task: t3b, Expect: store.Expect{Fence: 9, Status: core.StatusDispatched}}, // sees t3's write
	}
	errs := s.UpdateTasks(t.Context(), us)
	if len(errs) != len(us) {
		t.Fatalf("UpdateTasks returned %d errors for %d rows", len(errs), len(us))
	}
	want := []error{nil, core.ErrFenced, core.ErrNotFound, errAny, nil, nil, nil}
	for i, w := range want {
		checkErr(t, fmt.Sprintf("row %d (%s)", i, us[i].Task.ID), errs[i], w)
	}
	checkTask(t, "r0", mustGet(t, s, "r0"), *t0)
	checkTask(t, "r1", mustGet(t, s, "r1"), *t1)
	checkTask(t, "r3", mustGet(t, s, "r3"), *t3b)
	if got := mustGet(t, s, "r2"); !equalTask(got, before2) {
		t.Fatalf("a fenced row wrote: before %+v, after %+v", before2, got)
	}
	if errs := s.UpdateTasks(t.Context(), nil); len(errs) != 0 {
		t.Fatalf("UpdateTasks(nil): %v", errs)
	}
}

// testConcurrentUpdateTasks: batches race over the same runs from the same
// expected state, each batch touching the runs in a different order;
// exactly one writer wins each run, and nothing deadlocks.
func testConcurrentUpdateTasks(t *testing.T, s store.Store) {
	const writers, runs = 8, 24
	u := mustUser(t, s, "alice")
	for i := range runs {
		mustTask(t, s, u, fmt.Sprintf("r%02d", i), 0, at(0))
	}
	var wg sync.WaitGroup
	errs := make([][]error, writers)
	for w := range writers {
		wg.Go(func() {
			us := make([]store.Update, runs)
			for j := range runs {
				i := (j*(w+1) + w) % runs // a different order per writer
				if w%2 == 1 {
					i = runs - 1 - j
				}
				us[j] = store.Update{Task: &core.Task{ID: fmt.Sprintf("r%02d", i), Status: core.StatusDispatched,
					Fence: uint64(w + 1), Worker: fmt.Sprintf("w%d", w)},
					Expect: store.Expect{Fence: 0, Status: core.StatusQueued}}
			}
			errs[w] = s.UpdateTasks(t.Context(), us)
			for j, u := range us {
				if errs[w][j] == nil && u.Task.Worker != fmt.Sprintf("w%d", w) {
					t.Errorf("writer %d row %d: task changed", w, j)
				}
			}
		})
	}
	// Single-row writers race too.
	single := make([]error, runs)
	for i := range runs {
		wg.Go(func() {
			tk := core.Task{ID: fmt.Sprintf("r%02d", i), Status: core.StatusDispatched, Fence: 100, Worker: "single"}
			single[i] = s.UpdateTask(t.Context(), &tk, store.Expect{Fence: 0, Status: core.StatusQueued})
		})
	}
	wg.Wait()
	wins := map[string]string{}
	for i, err := range single {
		id := fmt.Sprintf("r%02d", i)
		switch {
		case err == nil:
			wins[id] = "single"
		case !errors.Is(err, core.ErrFenced):
			t.Fatalf("single writer of %s: %v", id, err)
		}
	}
	for w := range writers {
		for i := range runs {
			// Recompute the row's id as the writer did.
			id := ""
			for j := range runs {
				k := (j*(w+1) + w) % runs
				if w%2 == 1 {
					k = runs - 1 - j
				}
				if j == i {
					id = fmt.Sprintf("r%02d", k)
				}
			}
			switch err := errs[w][i]; {
			case err == nil && wins[id] != "":
				t.Fatalf("%s won by both %s and w%d", id, wins[id], w)
			case err == nil:
				wins[id] = fmt.Sprintf("w%d", w)
			case !errors.Is(err, core.ErrFenced):
				t.Fatalf("writer %d, %s: %v", w, id, err)
			}
		}
	}
	for i := range runs {
		id := fmt.Sprintf("r%02d", i)
		got := mustGet(t, s, id)
		if wins[id] == "" || got.Worker != wins[id] || got.Status != core.StatusDispatched {
			t.Fatalf("%s: stored worker %q status %s, winner %q", id, got.Worker, got.Status, wins[id])
		}
	}
}

// testConcurrentCreateTasks: batches of creates race with overlapping ids;
// each id is created exactly once, the others get core.ErrConflict.
func testConcurrentCreateTasks(t *testing.T, s store.Store) {
	const writers, runs = 8, 20
	u := mustUser(t, s, "alice")
	var wg sync.WaitGroup
	errs := make([][]error, writers)
	for w := range writers {
		wg.Go(func() {
			ts := make([]*core.Task, runs)
			for j := range ts {
				i := (j + w*3) % runs
				ts[j] = &core.Task{ID: fmt.Sprintf("c%02d", i), UserID: u.ID, Worker: fmt.Sprintf("w%d", w)}
			}
			errs[w] = s.CreateTasks(t.Context(), ts)
		})
	}
	wg.Wait()
	won := map[string]int{}
	for w := range writers {
		for j, err := range errs[w] {
			id := fmt.Sprintf("c%02d", (j+w*3)%runs)
			switch {
			case err == nil:
				won[id]++
			case !errors.Is(err, core.ErrConflict):
				t.Fatalf("writer %d, %s: %v", w, id, err)
			}
		}
	}
	for i := range runs {
		if id := fmt.Sprintf("c%02d", i); won[id] != 1 {
			t.Fatalf("%s created %d times, want once", id, won[id])
		}
	}
}

// errAny stands for "some error" in a want list.
var errAny = errors.New("any error")

func checkErr(t *testing.T, what string, got, want error) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("%s: got %v, want nil", what, got)
	case want == errAny && got == nil:
		t.Fatalf("%s: got nil, want an error", what)
	case want != nil && want != errAny && !errors.Is(got, want):
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// testBatcher: the group-committing Batcher over this backend gives every
// concurrent single-row caller the answer the backend would have.
func testBatcher(t *testing.T, s store.Store) {
	b := store.NewBatcher(s, 7)
	u := mustUser(t, s, "alice")
	const n = 40
	var wg sync.WaitGroup
	cerrs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tk := core.Task{ID: fmt.Sprintf("b%02d", i%(n/2)), UserID: u.ID} // every id twice
			if i == 3 {
				tk.UserID = u.ID + 1000
				tk.ID = "b-nouser"
			}
			cerrs[i] = b.CreateTask(t.Context(), &tk)
			if cerrs[i] == nil && (tk.User != "alice" || tk.Status != core.StatusQueued) {
				t.Errorf("created %s: user %q status %s", tk.ID, tk.User, tk.Status)
			}
		})
	}
	wg.Wait()
	created := map[string]int{}
	for i, err := range cerrs {
		id := fmt.Sprintf("b%02d", i%(n/2))
		switch {
		case i == 3:
			checkErr(t, "create without owner", err, core.ErrNotFound)
		case err == nil:
			created[id]++
		case !errors.Is(err, core.ErrConflict):
			t.Fatalf("create %s: %v", id, err)
		}
	}
	for i := range n / 2 {
		if id := fmt.Sprintf("b%02d", i); created[id] != 1 && !(i == 3 && created[id] == 0) {
			t.Fatalf("%s created %d times", id, created[id])
		}
	}
	// Every run (but b03, maybe) now exists once; race fenced updates on them.
	uerrs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("b%02d", i%(n/2))
			tk := core.Task{ID: id, Status: core.StatusDispatched, Fence: uint64(i + 1), Worker: fmt.Sprintf("w%d", i)}
			uerrs[i] = b.UpdateTask(t.Context(), &tk, store.Expect{Fence: 0, Status: core.StatusQueued})
			if uerrs[i] == nil && tk.UpdatedAt.IsZero() {
				t.Errorf("update %s: UpdatedAt not set", id)
			}
		})
	}
	wg.Wait()
	for i := range n / 2 {
		id := fmt.Sprintf("b%02d", i)
		tk, err := s.Task(t.Context(), id)
		if errors.Is(err, core.ErrNotFound) {
			checkErr(t, "update of a missing run", uerrs[i], core.ErrNotFound)
			checkErr(t, "update of a missing run", uerrs[i+n/2], core.ErrNotFound)
			continue
		}
		a, c := uerrs[i], uerrs[i+n/2]
		if (a == nil) == (c == nil) {
			t.Fatalf("%s: two writers from one state got %v and %v, want exactly one winner", id, a, c)
		}
		w := i
		if a != nil {
			checkErr(t, id, a, core.ErrFenced)
			w = i + n/2
		} else {
			checkErr(t, id, c, core.ErrFenced)
		}
		if tk.Worker != fmt.Sprintf("w%d", w) || tk.Fence != uint64(w+1) {
			t.Fatalf("%s: stored %s/%d, want the winner w%d", id, tk.Worker, tk.Fence, w)
		}
	}
}
