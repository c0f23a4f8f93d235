package storetest

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// listAll pages through f with f.Limit until the cursor runs out and returns
// every run seen, checking page sizes on the way.
func listAll(t *testing.T, s store.Store, f store.Filter) []core.Task {
	t.Helper()
	var all []core.Task
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatalf("ListTasks(%+v): cursor never ran out", f)
		}
		ts, next, err := s.ListTasks(t.Context(), f)
		if err != nil {
			t.Fatalf("ListTasks(%+v): %v", f, err)
		}
		limit := f.Limit
		if limit <= 0 {
			limit = 50
		}
		if len(ts) > limit || (next != "" && len(ts) != limit) {
			t.Fatalf("ListTasks(%+v): page of %d with next %q", f, len(ts), next)
		}
		all = append(all, ts...)
		if next == "" {
			return all
		}
		f.Cursor = next
	}
}

func testListPagination(t *testing.T, s store.Store) {
	users := []core.User{mustUser(t, s, "alice"), mustUser(t, s, "bob")}
	const n = 30
	var model []core.Task
	for i := range n {
		// Ids are not in creation order, and runs come in pairs created at
		// the same instant, so the id tie-break is exercised.
		tk := core.Task{ID: fmt.Sprintf("t%02d", (i*7)%n), UserID: users[i%2].ID,
			Project: fmt.Sprintf("p%d", i%3), CreatedAt: at(time.Duration(i/2) * time.Millisecond)}
		if err := s.CreateTask(t.Context(), &tk); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			tk = mustMove(t, s, tk.ID, core.StatusRunning, uint64(i+1))
		}
		model = append(model, tk)
	}
	sort.Slice(model, func(i, j int) bool {
		a, b := model[i], model[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.ID > b.ID
	})
	match := func(f store.Filter) []string {
		var out []string
		for _, tk := range model {
			if (f.Status == "" || tk.Status == f.Status) && (f.User == "" || tk.User == f.User) &&
				(f.Project == "" || tk.Project == f.Project) {
				out = append(out, tk.ID)
			}
		}
		return out
	}
	for _, f := range []store.Filter{
		{},
		{Status: core.StatusRunning},
		{Status: core.StatusQueued},
		{User: "bob"},
		{Project: "p1"},
		{User: "alice", Project: "p2", Status: core.StatusQueued},
		{User: "nobody"},
		{Project: "none"},
		{Status: core.StatusFailed},
	} {
		want := match(f)
		for _, limit := range []int{1, 4, 7, n, 0} {
			f.Limit = limit
			got := listAll(t, s, f)
			checkIDs(t, fmt.Sprintf("ListTasks(%+v)", f), got, want)
			for _, tk := range got {
				if tk.User == "" || tk.CreatedAt.IsZero() {
					t.Fatalf("ListTasks(%+v): incomplete run %+v", f, tk)
				}
			}
		}
	}
	// A full run from a list equals the same run read alone.
	ts, _, err := s.ListTasks(t.Context(), store.Filter{Limit: 1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("ListTasks(limit 1): %v, %d runs", err, len(ts))
	}
	checkTask(t, "listed run", ts[0], mustGet(t, s, ts[0].ID))
}

// testListStableUnderInserts: runs created while a client pages neither
// repeat nor shift older pages (keyset, not offset).
func testListStableUnderInserts(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	var want []string
	for i := range 10 {
		id := fmt.Sprintf("r%02d", i)
		mustTask(t, s, u, id, 0, at(time.Duration(i)*time.Second))
		want = append([]string{id}, want...)
	}
	first, next, err := s.ListTasks(t.Context(), store.Filter{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	mustTask(t, s, u, "r-newer", 0, at(time.Hour))
	rest := listAll(t, s, store.Filter{Limit: 4, Cursor: next})
	checkIDs(t, "pages around an insert", append(first, rest...), want)
}

func testListLimits(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	const n = 501
	for i := range n {
		mustTask(t, s, u, fmt.Sprintf("r%03d", i), 0, at(time.Duration(i)))
	}
	f := func(limit, wantLen int) {
		t.Helper()
		ts, next, err := s.ListTasks(t.Context(), store.Filter{Limit: limit})
		if err != nil || len(ts) != wantLen || next == "" {
			t.Fatalf("ListTasks(limit %d): %d runs, next %q, %v; want %d runs and a cursor",
				limit, len(ts), next, err, wantLen)
		}
	}
	f(0, 50)
	f(-3, 50)
	f(500, 500)
	f(501, 500)
	f(100000, 500)
}

func testBadCursor(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	for i := range 3 {
		mustTask(t, s, u, fmt.Sprintf("r%d", i), 0, at(time.Duration(i)))
	}
	_, good, err := s.ListTasks(t.Context(), store.Filter{Limit: 1})
	if err != nil || good == "" {
		t.Fatalf("ListTasks(limit 1): cursor %q, %v", good, err)
	}
	for _, c := range []string{"!!!", "%%", " ", "Zm9v", "eyJ4IjoxfQ", good + "*", "*" + good} {
		_, _, err := s.ListTasks(t.Context(), store.Filter{Limit: 1, Cursor: c})
		if !errors.Is(err, store.ErrBadCursor) {
			t.Fatalf("ListTasks(cursor %q): got %v, want ErrBadCursor", c, err)
		}
	}
}
