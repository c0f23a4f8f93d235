package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// No conformance run over the decorator: its packing in the background
// changes a sweep's version (SweepSeriesVersion) between two calls, which
// the suite's version tests take for a store that changed by itself. What
// it adds is tested below; everything else passes through.

// A run given points through the decorator has its series packed once its
// end is committed; a run whose points came another way is left to the
// first read; a late point drops the pack and packs the run again; and
// the sweep's read of the packs equals its runs' rows.
func TestPackingAtEnd_PacksAtTheEnd(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rlsched.db")
	raw, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st := store.PackingAtEnd(raw)
	t.Cleanup(func() { _ = st.Close() })
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	// packs is the points of run id's pack of "r", 0 when it has none.
	packs := func(id string) int {
		t.Helper()
		n := 0
		err := db.QueryRow(`SELECT COALESCE(SUM(points), 0) FROM metric_packs WHERE task_id = ? AND name = 'r'`, id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	sw := &store.Sweep{ID: "s1", Name: "s1", UserID: u.ID, Spec: json.RawMessage(`{}`), CreatedAt: time.Now()}
	ts := []*core.Task{
		{ID: "r-packed", UserID: u.ID, Command: []string{"true"}, Params: json.RawMessage(`{"seed":1}`), CreatedAt: time.Now()},
		{ID: "r-other", UserID: u.ID, Command: []string{"true"}, Params: json.RawMessage(`{"seed":2}`), CreatedAt: time.Now().Add(time.Millisecond)},
	}
	if err := st.CreateSweep(ctx, sw, ts); err != nil {
		t.Fatal(err)
	}
	pts := []core.MetricPoint{{Step: 1, Name: "r", Value: 1}, {Step: 2, Name: "r", Value: 0.5}, {Step: 1, Name: "loss", Value: 3}}
	if err := st.AppendMetrics(ctx, "r-packed", pts); err != nil {
		t.Fatal(err)
	}
	// r-other's points reach the backend directly (as another master's would).
	if err := raw.AppendMetrics(ctx, "r-other", pts); err != nil {
		t.Fatal(err)
	}
	finish := func(tk *core.Task, fence uint64) {
		t.Helper()
		d := *tk
		if err := d.Dispatch("w1", nil, fence); err != nil {
			t.Fatal(err)
		}
		if err := st.UpdateTask(ctx, &d, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(time.Now()); err != nil {
			t.Fatal(err)
		}
		e := d
		code := 0
		if err := e.Finish(core.StatusSucceeded, &code, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		// The end through UpdateTasks, as the dispatcher's group writes go.
		if errs := st.UpdateTasks(ctx, []store.Update{{Task: &d, Expect: store.Expect{Fence: fence, Status: core.StatusDispatched}},
			{Task: &e, Expect: store.Expect{Fence: fence, Status: core.StatusRunning}}}); errs[0] != nil || errs[1] != nil {
			t.Fatalf("the end of %s: %v", tk.ID, errs)
		}
	}
	finish(ts[1], 1)
	if packs("r-packed") != 0 {
		t.Fatal("r-packed was packed before its end")
	}
	finish(ts[0], 2)
	testutil.WaitFor(t, 10*time.Second, "r-packed's series packed at its end", func() bool { return packs("r-packed") == 2 })
	// One goroutine packs in order of the ends: r-other, ended first, was
	// never queued.
	if n := packs("r-other"); n != 0 {
		t.Fatalf("r-other, whose points did not come through the decorator, has a pack of %d points", n)
	}
	var loss int
	if err := db.QueryRow(`SELECT points FROM metric_packs WHERE task_id = 'r-packed' AND name = 'loss'`).Scan(&loss); err != nil || loss != 1 {
		t.Fatalf("r-packed's loss pack: %d points (%v), want every name packed", loss, err)
	}

	// A late point (a store outage's backlog) drops the pack, which is made again.
	if err := st.AppendMetrics(ctx, "r-packed", []core.MetricPoint{{Step: 3, Name: "r", Value: 9}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "r-packed packed again with its late point", func() bool { return packs("r-packed") == 3 })

	// The read of the packs (and of r-other's rows, which it packs) is the
	// rows' read.
	ms, _, err := st.SweepMetrics(ctx, "s1", "r")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		rows, err := raw.Metrics(ctx, m.TaskID, []string{"r"})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.Points, rows["r"]) {
			t.Fatalf("%s: the sweep's read %v, its rows %v", m.TaskID, m.Points, rows["r"])
		}
	}
	if packs("r-other") != 2 {
		t.Fatal("the first read did not pack r-other")
	}
}
