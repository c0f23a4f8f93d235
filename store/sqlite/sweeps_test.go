package sqlite

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/internal/sqlutil"
)

// planOf is SQLite's plan of q, its steps joined by "; ".
func planOf(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestSweepIndexes: the sweep queries use their indexes, without sorting.
func TestSweepIndexes(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	f := func(what, q string, want string, args ...any) {
		t.Helper()
		p := planOf(t, s, q, args...)
		if !strings.Contains(p, want) || strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN t ") {
			t.Errorf("%s: plan %q, want %s without a sort or a scan of tasks", what, p, want)
		}
	}
	f("SweepLimits", sqlutil.SweepLimitsQuery(2), "tasks_sweep_active", "s1", "s2")
	f("packed series", sqlutil.SeriesPacksQuery, "PRIMARY KEY", "r", "s1")
	f("series as rows", sqlutil.SeriesRowsQuery, "PRIMARY KEY", "r", "s1", "r")
	f("a sweep's version", sqlutil.SeriesVersionQuery(dialects.Sweep.PacksIndex), "COVERING INDEX metric_packs_points", "r", "s1")
	f("runs of a sweep", sqlutil.TaskCols+`WHERE t.sweep_id = ? ORDER BY t.created_at DESC, t.id DESC LIMIT 5`,
		"tasks_sweep_newest", "s1")
	f("reruns of a run", sqlutil.TaskCols+`WHERE t.rerun_of <> '' AND t.rerun_of = ? ORDER BY t.created_at DESC, t.id DESC LIMIT 5`,
		"tasks_rerun_of", "r1")
	// PackSeries sorts its at most 256 runs' points (SQLite cannot tell
	// that its IN list comes out in order), but finds them by key.
	if p := planOf(t, s, sqlutil.EndedSeriesQuery(2), "r1", "r2"); !strings.Contains(p, "SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)") ||
		!strings.Contains(p, "SEARCH m USING PRIMARY KEY") {
		t.Errorf("PackSeries: plan %q, want the runs and their points by key", p)
	}
}

// TestWaitingChildrenPlan: the children of a batch of ended runs are found
// from the edges' parent index, never by walking the queue.
func TestWaitingChildrenPlan(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	p := planOf(t, s, sqlutil.WaitingChildrenQuery(3), "p1", "p2", "p3")
	if !strings.Contains(p, "task_deps_parent") || strings.Contains(p, "SCAN c") || strings.Contains(p, "tasks_status") {
		t.Errorf("WaitingChildren: plan %q, want the edges by task_deps_parent and each child by its key", p)
	}
}

// TestSweepMetricsPacks: the ended runs' series are packed by the first
// read, and a late point drops the pack.
func TestSweepMetricsPacks(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	ctx := t.Context()
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := s.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	var ts []*core.Task
	for i := range 3 {
		ts = append(ts, &core.Task{ID: fmt.Sprintf("m%d", i), UserID: u.ID, Params: json.RawMessage(`{"seed":1}`)})
	}
	if err := s.CreateSweep(ctx, &store.Sweep{ID: "s1", UserID: u.ID, CreatedAt: time.Now()}, ts); err != nil {
		t.Fatal(err)
	}
	for i, tk := range ts {
		if err := s.AppendMetrics(ctx, tk.ID, []core.MetricPoint{{Step: 1, Name: "r", Value: float64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	packs := func() int {
		t.Helper()
		var n int
		if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM metric_packs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, st := range []core.Status{core.StatusSucceeded, core.StatusFailed} {
		tk := *ts[i]
		for _, next := range []core.Status{core.StatusRunning, st} {
			exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
			tk.Status, tk.Fence = next, uint64(i+1)
			if err := s.UpdateTask(ctx, &tk, exp); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := s.SweepMetrics(ctx, "s1", "r"); err != nil {
		t.Fatal(err)
	}
	if n := packs(); n != 2 {
		t.Fatalf("%d packs after the first read, want 2 (the ended runs)", n)
	}
	if err := s.AppendMetrics(ctx, "m0", []core.MetricPoint{{Step: 2, Name: "r", Value: 5}}); err != nil {
		t.Fatal(err)
	}
	if n := packs(); n != 1 {
		t.Fatalf("%d packs after a late point, want 1", n)
	}
	got, _, err := s.SweepMetrics(ctx, "s1", "r")
	if err != nil || len(got) != 3 || got[0].TaskID != "m0" || len(got[0].Points) != 2 || packs() != 2 {
		t.Fatalf("after a late point: %v %v, %d packs", got, err, packs())
	}
}

func TestPackRoundTrip(t *testing.T) {
	for _, pts := range [][][2]float64{nil, {{0, 0}}, {{-5, 1e-300}, {3, -2}, {1 << 50, 7.5}}} {
		got, err := sqlutil.DecodePack(sqlutil.EncodePack(pts))
		if err != nil || len(got) != len(pts) || fmt.Sprint(got) != fmt.Sprint(append([][2]float64{}, pts...)) {
			t.Fatalf("round trip of %v: %v %v", pts, got, err)
		}
	}
	good := sqlutil.EncodePack([][2]float64{{1, 2}, {3, 4}})
	for _, b := range [][]byte{nil, {2}, good[:len(good)-1], append(append([]byte{}, good...), 0), {1, 0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := sqlutil.DecodePack(b); err == nil {
			t.Fatalf("DecodePack(%x): no error", b)
		}
	}
}
