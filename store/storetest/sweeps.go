package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// newSweep makes sweep id of u with n members r-<id>-<i>, the member's
// params {"lr": i%2 / 10, "seed": i}.
func newSweep(id string, u core.User, n, maxParallel int) (*store.Sweep, []*core.Task) {
	sw := &store.Sweep{ID: id, Name: "sweep " + id, Project: "proj", UserID: u.ID, MaxParallel: maxParallel,
		Spec: json.RawMessage(`{ "grid": {"lr": [0, 0.1]} }`), CreatedAt: at(time.Duration(len(id)) * time.Second)}
	ts := make([]*core.Task, n)
	for i := range ts {
		ts[i] = &core.Task{ID: fmt.Sprintf("r-%s-%d", id, i), Name: fmt.Sprintf("%s %d", id, i), UserID: u.ID,
			Command: []string{"python3", "train.py"}, MaxRetries: 1, Tags: []string{core.SweepTag(id)},
			Params:    json.RawMessage(fmt.Sprintf(`{"lr": %g, "seed": %d}`, float64(i%2)/10, i)),
			CreatedAt: at(time.Duration(i) * time.Millisecond)}
	}
	return sw, ts
}

func mustSweep(t *testing.T, s store.Store, id string, u core.User, n, maxParallel int) (*store.Sweep, []*core.Task) {
	t.Helper()
	sw, ts := newSweep(id, u, n, maxParallel)
	if err := s.CreateSweep(t.Context(), sw, ts); err != nil {
		t.Fatalf("CreateSweep(%s): %v", id, err)
	}
	return sw, ts
}

// end moves run id from QUEUED through RUNNING to st.
func end(t *testing.T, s store.Store, id string, st core.Status, fence uint64) {
	t.Helper()
	mustMove(t, s, id, core.StatusRunning, fence)
	mustMove(t, s, id, st, fence)
}

func counts(kv ...any) map[core.Status]int {
	m := map[core.Status]int{}
	for _, st := range core.Statuses() {
		m[st] = 0
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(core.Status)] = kv[i+1].(int)
	}
	return m
}

// testSweepCreate: a sweep and its members are stored as given, read back
// with counts, and its runs list in member order.
func testSweepCreate(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	sw, ts := mustSweep(t, s, "s1", u, 5, 2)
	if sw.User != "alice" || sw.Members != 5 || string(sw.Spec) != `{"grid":{"lr":[0,0.1]}}` {
		t.Fatalf("CreateSweep left %+v", sw)
	}
	got, err := s.Sweep(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "s1" || got.Name != "sweep s1" || got.Project != "proj" || got.UserID != u.ID || got.User != "alice" ||
		got.MaxParallel != 2 || got.Members != 5 || string(got.Spec) != string(sw.Spec) || !got.CreatedAt.Equal(sw.CreatedAt) {
		t.Fatalf("Sweep: got %+v, want %+v", got, sw)
	}
	if !reflect.DeepEqual(got.Counts, counts(core.StatusQueued, 5)) {
		t.Fatalf("counts: %v", got.Counts)
	}
	runs, err := s.SweepRuns(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		want := *ts[i]
		if want.SweepID != "s1" || want.User != "alice" || want.Status != core.StatusQueued {
			t.Fatalf("member %d as returned: %+v", i, want)
		}
		checkTask(t, fmt.Sprintf("member %d", i), r, want)
		checkTask(t, fmt.Sprintf("member %d by id", i), mustGet(t, s, r.ID), want)
	}
	if len(runs) != 5 {
		t.Fatalf("SweepRuns: %d runs, want 5", len(runs))
	}
	for _, f := range []func() error{
		func() error { _, err := s.Sweep(ctx, "s-missing"); return err },
		func() error { _, err := s.SweepRuns(ctx, "s-missing"); return err },
		func() error { _, _, err := s.SweepMetrics(ctx, "s-missing", "loss"); return err },
		func() error { _, err := s.SweepSeriesVersion(ctx, "s-missing", "loss"); return err },
		func() error {
			_, err := s.RetrySweep(ctx, "s-missing", func(t core.Task) core.Task { return t })
			return err
		},
	} {
		if err := f(); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("unknown sweep: got %v, want ErrNotFound", err)
		}
	}
	// The members are ordinary runs: in the queue and in listings.
	q, err := s.QueuedTasks(ctx, 50)
	if err != nil || len(q) != 5 {
		t.Fatalf("QueuedTasks: %d runs, %v", len(q), err)
	}
	checkIDs(t, "ListTasks(sweep)", listAll(t, s, store.Filter{Sweep: "s1", Limit: 2}),
		[]string{"r-s1-4", "r-s1-3", "r-s1-2", "r-s1-1", "r-s1-0"})
}

// testSweepAllOrNothing: a sweep whose member cannot be stored leaves no
// trace, nor does one of an unknown owner or with a taken id.
func testSweepAllOrNothing(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r-s2-3", 0, at(0)) // member 3's id is taken
	before := countRuns(t, s)
	sw, ts := newSweep("s2", u, 6, 0)
	if err := s.CreateSweep(ctx, sw, ts); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("CreateSweep with a taken run id: got %v, want ErrConflict", err)
	}
	sw, ts = newSweep("s3", core.User{ID: u.ID + 1000}, 3, 0)
	if err := s.CreateSweep(ctx, sw, ts); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("CreateSweep of an unknown owner: got %v, want ErrNotFound", err)
	}
	sw, ts = newSweep("s4", u, 3, 0)
	ts[1].ID = "bad id!"
	if err := s.CreateSweep(ctx, sw, ts); err == nil {
		t.Fatal("CreateSweep with an invalid run id: no error")
	}
	for _, id := range []string{"s2", "s3", "s4"} {
		if _, err := s.Sweep(ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("Sweep(%s) after a failed create: got %v, want ErrNotFound", id, err)
		}
	}
	if n := countRuns(t, s); n != before {
		t.Fatalf("failed creates left %d runs, want %d", n, before)
	}
	if sws, _, err := s.ListSweeps(ctx, store.SweepFilter{}); err != nil || len(sws) != 0 {
		t.Fatalf("ListSweeps after failed creates: %v %v", sws, err)
	}
	// A taken sweep id is a conflict too, and the first sweep stays whole.
	mustSweep(t, s, "s5", u, 2, 0)
	sw, ts = newSweep("s5", u, 2, 0)
	for _, tk := range ts {
		tk.ID += "-again"
	}
	if err := s.CreateSweep(ctx, sw, ts); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("CreateSweep with a taken sweep id: got %v, want ErrConflict", err)
	}
	if runs, err := s.SweepRuns(ctx, "s5"); err != nil || len(runs) != 2 || runs[0].ID != "r-s5-0" {
		t.Fatalf("the first sweep after a conflict: %v %v", ids(runs), err)
	}
	if n := countRuns(t, s); n != before+2 {
		t.Fatalf("%d runs, want %d", n, before+2)
	}
}

func countRuns(t *testing.T, s store.Store) int {
	t.Helper()
	c, err := s.CountByStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func rerunOf(old core.Task) core.Task {
	nt := old
	nt.ID, nt.Attempt, nt.CreatedAt, nt.UpdatedAt = "", 1, time.Time{}, time.Time{}
	nt.Worker, nt.GPUIndices, nt.ExitCode, nt.Error, nt.FinalReward = "", nil, nil, "", nil
	nt.StartedAt, nt.FinishedAt = nil, nil
	return nt
}

// testSweepRetry: a retry reruns exactly the members whose latest run ended
// without success, once, also when two retries race.
func testSweepRetry(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	_, ts := mustSweep(t, s, "s1", u, 6, 0)
	end(t, s, ts[0].ID, core.StatusFailed, 1)
	end(t, s, ts[1].ID, core.StatusSucceeded, 2)
	end(t, s, ts[2].ID, core.StatusCancelled, 3)
	end(t, s, ts[3].ID, core.StatusTimeout, 4)
	mustMove(t, s, ts[4].ID, core.StatusRunning, 5)
	// ts[5] stays QUEUED.
	got, err := s.RetrySweep(ctx, "s1", rerunOf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("RetrySweep: %d runs, want 3 (members 0, 2, 3)", len(got))
	}
	for i, m := range []int{0, 2, 3} {
		nt := got[i]
		old := *ts[m]
		if nt.RerunOf != old.ID || nt.SweepID != "s1" || nt.Status != core.StatusQueued || nt.ID == old.ID ||
			nt.User != "alice" || string(nt.Params) != string(old.Params) {
			t.Fatalf("retry of member %d: %+v", m, nt)
		}
		checkTask(t, "retried run read back", mustGet(t, s, nt.ID), nt)
	}
	runs, err := s.SweepRuns(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{got[0].ID, ts[1].ID, got[1].ID, got[2].ID, ts[4].ID, ts[5].ID}
	checkIDs(t, "latest runs after a retry", runs, want)
	sw, err := s.Sweep(ctx, "s1")
	if err != nil || !reflect.DeepEqual(sw.Counts, counts(core.StatusQueued, 4, core.StatusSucceeded, 1, core.StatusRunning, 1)) {
		t.Fatalf("counts after a retry: %v %v", sw.Counts, err)
	}
	// Idempotent: nothing is left to retry.
	if again, err := s.RetrySweep(ctx, "s1", rerunOf); err != nil || len(again) != 0 {
		t.Fatalf("second RetrySweep: %v %v", ids(again), err)
	}
	// Every run of the sweep is listed, retried ones too.
	if all := listAll(t, s, store.Filter{Sweep: "s1"}); len(all) != 9 {
		t.Fatalf("ListTasks(sweep) after a retry: %d runs, want 9", len(all))
	}
	checkIDs(t, "ListTasks(rerunOf)", listAll(t, s, store.Filter{RerunOf: ts[2].ID}), []string{got[1].ID})

	// Two retries at once: each failed member gets exactly one new run.
	for i, nt := range got {
		end(t, s, nt.ID, core.StatusFailed, uint64(10+i))
	}
	var wg sync.WaitGroup
	res := make([][]core.Task, 4)
	errs := make([]error, 4)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = s.RetrySweep(ctx, "s1", rerunOf)
		}()
	}
	wg.Wait()
	n := 0
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("concurrent RetrySweep: %v", errs[i])
		}
		n += len(res[i])
	}
	if n != 3 {
		t.Fatalf("concurrent retries made %d runs, want 3", n)
	}
	if all := listAll(t, s, store.Filter{Sweep: "s1"}); len(all) != 12 {
		t.Fatalf("ListTasks(sweep) after concurrent retries: %d runs, want 12", len(all))
	}
}

// testSweepList: sweeps newest first across pages, by owner, with counts.
func testSweepList(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("s%d", i)
		u := alice
		if i%3 == 2 {
			u = bob
		}
		sw, ts := newSweep(id, u, 2, 0)
		sw.CreatedAt = at(time.Duration(i/2) * time.Second) // pairs at one instant: the id breaks ties
		if err := s.CreateSweep(ctx, sw, ts); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	end(t, s, "r-s6-1", core.StatusFailed, 1)
	var got []string
	var counted map[core.Status]int
	f := store.SweepFilter{Limit: 3}
	for page := 0; ; page++ {
		sws, next, err := s.ListSweeps(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if page > 10 || len(sws) > 3 || (next != "" && len(sws) != 3) {
			t.Fatalf("ListSweeps page %d: %d sweeps, next %q", page, len(sws), next)
		}
		for _, sw := range sws {
			got = append(got, sw.ID)
			if sw.ID == "s6" {
				counted = sw.Counts
			}
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ListSweeps: %v, want %v", got, want)
	}
	if !reflect.DeepEqual(counted, counts(core.StatusQueued, 1, core.StatusFailed, 1)) {
		t.Fatalf("counts of s6: %v", counted)
	}
	sws, _, err := s.ListSweeps(ctx, store.SweepFilter{User: "bob"})
	if err != nil || len(sws) != 2 || sws[0].ID != "s5" || sws[1].ID != "s2" || sws[0].User != "bob" {
		t.Fatalf("ListSweeps(bob): %+v %v", sws, err)
	}
	if _, _, err := s.ListSweeps(ctx, store.SweepFilter{Cursor: "garbage!"}); !errors.Is(err, store.ErrBadCursor) {
		t.Fatalf("ListSweeps(bad cursor): %v", err)
	}
}

// testSweepMetrics: the series of each member's latest run, the same
// before and after the store packs the ended ones, and a point written
// after a pack is not lost.
func testSweepMetrics(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	_, ts := mustSweep(t, s, "s1", u, 3, 0)
	mustTask(t, s, u, "r-other", 0, at(0))
	add := func(id string, pts ...core.MetricPoint) {
		t.Helper()
		if err := s.AppendMetrics(ctx, id, pts); err != nil {
			t.Fatal(err)
		}
	}
	add(ts[0].ID, core.MetricPoint{Step: 2, Name: "r", Value: 2.5}, core.MetricPoint{Step: -1, Name: "r", Value: -1e300},
		core.MetricPoint{Step: 1 << 40, Name: "r", Value: 7}, core.MetricPoint{Step: 1, Name: "loss", Value: 1})
	add(ts[1].ID, core.MetricPoint{Step: 5, Name: "r", Value: 0.125})
	add("r-other", core.MetricPoint{Step: 1, Name: "r", Value: 99})
	want := map[string][][2]float64{
		ts[0].ID: {{-1, -1e300}, {2, 2.5}, {1 << 40, 7}},
		ts[1].ID: {{5, 0.125}},
	}
	check := func(what string) {
		t.Helper()
		ms, _, err := s.SweepMetrics(ctx, "s1", "r")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		runs, err := s.SweepRuns(ctx, "s1")
		if err != nil || len(runs) != len(ms) {
			t.Fatalf("%s: %d members, SweepRuns %d (%v)", what, len(ms), len(runs), err)
		}
		got := map[string][][2]float64{}
		for i, m := range ms {
			r := runs[i]
			if m.TaskID != r.ID || string(m.Params) != string(r.Params) || m.Status != r.Status ||
				!reflect.DeepEqual(m.FinalReward, r.FinalReward) {
				t.Fatalf("%s: member %d is %+v, its latest run %+v", what, i, m, r)
			}
			if m.Points != nil {
				got[m.TaskID] = m.Points
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
	check("active runs")
	end(t, s, ts[0].ID, core.StatusSucceeded, 1)
	end(t, s, ts[1].ID, core.StatusFailed, 2)
	if err := s.SetFinalReward(ctx, ts[0].ID, 4.5); err != nil {
		t.Fatal(err)
	}
	check("ended runs, first read")
	check("ended runs, second read")
	// A late point of an ended run (a store outage's backlog) is seen.
	add(ts[0].ID, core.MetricPoint{Step: 3, Name: "r", Value: 3})
	want[ts[0].ID] = [][2]float64{{-1, -1e300}, {2, 2.5}, {3, 3}, {1 << 40, 7}}
	check("after a late point")
	check("after a late point, again")
	// The retried member's new run replaces the old one's series.
	retried, err := s.RetrySweep(ctx, "s1", rerunOf)
	if err != nil || len(retried) != 1 {
		t.Fatalf("RetrySweep: %v %v", ids(retried), err)
	}
	delete(want, ts[1].ID)
	check("after a retry")
	add(retried[0].ID, core.MetricPoint{Step: 9, Name: "r", Value: 9})
	want[retried[0].ID] = [][2]float64{{9, 9}}
	check("the retry's points")
	if got, _, err := s.SweepMetrics(ctx, "s1", "nope"); err != nil || len(got) != 3 || got[0].Points != nil {
		t.Fatalf("SweepMetrics of an unknown name: %+v %v", got, err)
	}
	// Metrics of one run are untouched by packing.
	m, err := s.Metrics(ctx, ts[0].ID, nil)
	if err != nil || len(m["r"]) != 4 || len(m["loss"]) != 1 {
		t.Fatalf("Metrics after packing: %v %v", m, err)
	}
}

// testPackSeries: a run's series packed at its end (as PackingAtEnd does)
// is what SweepMetrics then reads, equal to the read of its rows; only
// ended runs are packed, every name, and a late point drops the pack, is
// read, and is packed again.
func testPackSeries(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	// Two sweeps of the same series: s1 is packed by PackSeries, s2 read as
	// rows (its first read), the reference.
	_, ts := mustSweep(t, s, "s1", u, 3, 0)
	_, ref := mustSweep(t, s, "s2", u, 3, 0)
	for i := range ts {
		var pts []core.MetricPoint
		for step := range 50 {
			pts = append(pts, core.MetricPoint{Step: int64(step * (i + 1)), Name: "r", Value: float64(step) / 3},
				core.MetricPoint{Step: int64(step), Name: "loss", Value: -float64(step)})
		}
		for _, tk := range []*core.Task{ts[i], ref[i]} {
			if err := s.AppendMetrics(ctx, tk.ID, pts); err != nil {
				t.Fatal(err)
			}
		}
	}
	version := func(what string) string { t.Helper(); return seriesVersion(t, s, what) }
	pack := func(ids ...string) {
		t.Helper()
		if err := s.PackSeries(ctx, append(ids, "r-missing")); err != nil {
			t.Fatalf("PackSeries: %v", err)
		}
	}
	// A run not ended is not packed: packing it once ended changes the version.
	end(t, s, ts[0].ID, core.StatusSucceeded, 1)
	end(t, s, ts[1].ID, core.StatusFailed, 2)
	mustMove(t, s, ts[2].ID, core.StatusRunning, 3)
	pack(ts[2].ID)
	end(t, s, ts[2].ID, core.StatusSucceeded, 3)
	v0 := version("ended, not packed")
	pack(ts[2].ID)
	v1 := version("one packed")
	if v0 == "" || v1 == v0 {
		t.Fatalf("version %q before packing the ended run, %q after: want a change", v0, v1)
	}
	pack(ts[0].ID, ts[1].ID, ts[2].ID)
	packed := version("packed")
	if packed == v1 {
		t.Fatalf("version %q before packing two more runs, %q after: want a change", v1, packed)
	}
	for i, tk := range ref {
		end(t, s, tk.ID, core.StatusSucceeded, uint64(10+i))
	}
	for _, name := range []string{"r", "loss"} {
		rows, _, err := s.SweepMetrics(ctx, "s2", name)
		if err != nil {
			t.Fatal(err)
		}
		ms, v, err := s.SweepMetrics(ctx, "s1", name)
		if err != nil {
			t.Fatal(err)
		}
		// Every name was packed: the read of s1 packs nothing more.
		if name == "r" && v != packed {
			t.Fatalf("a read of packed series answers version %q, the store had %q: it packed again", v, packed)
		}
		for i := range ms {
			if len(ms[i].Points) != 50 || !reflect.DeepEqual(ms[i].Points, rows[i].Points) {
				t.Fatalf("%s of member %d: packed %v, rows %v", name, i, ms[i].Points, rows[i].Points)
			}
		}
	}
	// A late point drops the run's packs; it is read, and packed again.
	if err := s.AppendMetrics(ctx, ts[0].ID, []core.MetricPoint{{Step: 1000, Name: "r", Value: 7}}); err != nil {
		t.Fatal(err)
	}
	late := version("a late point")
	if late == packed {
		t.Fatalf("version %q after a late point, as before: want a change", late)
	}
	pack(ts[0].ID)
	repacked := version("repacked")
	if repacked == late {
		t.Fatalf("version %q after packing the late point, as before: want a change", repacked)
	}
	ms, v, err := s.SweepMetrics(ctx, "s1", "r")
	if err != nil || v != repacked {
		t.Fatalf("read after repacking: version %q (store %q) %v", v, repacked, err)
	}
	if p := ms[0].Points; len(p) != 51 || p[50] != [2]float64{1000, 7} {
		t.Fatalf("the late point after repacking: %v", p)
	}
}

// testSweepLimits: capped sweeps only, with their active members.
func testSweepLimits(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	_, a := mustSweep(t, s, "s1", u, 4, 2)
	mustSweep(t, s, "s2", u, 2, 0)
	_, c := mustSweep(t, s, "s3", u, 3, 1)
	mustMove(t, s, a[0].ID, core.StatusDispatched, 1)
	mustMove(t, s, a[1].ID, core.StatusDispatched, 2)
	mustMove(t, s, a[1].ID, core.StatusRunning, 2)
	end(t, s, a[2].ID, core.StatusSucceeded, 3)
	end(t, s, c[0].ID, core.StatusFailed, 4)
	got, err := s.SweepLimits(ctx, []string{"s1", "s2", "s3", "s-missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]core.SweepLimit{"s1": {MaxParallel: 2, Active: 2}, "s3": {MaxParallel: 1, Active: 0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SweepLimits: %v, want %v", got, want)
	}
	if got, err := s.SweepLimits(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("SweepLimits(nil): %v %v", got, err)
	}
}

// testSweepVersion: the version of a sweep's series is "" while a member
// is not done, and changes with everything SweepMetrics answers.
func testSweepVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	_, ts := mustSweep(t, s, "s1", u, 2, 0)
	version := func(what string) string { t.Helper(); return seriesVersion(t, s, what) }
	read := func(what string) string {
		t.Helper()
		_, v, err := s.SweepMetrics(ctx, "s1", "r")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	for _, tk := range ts {
		if err := s.AppendMetrics(ctx, tk.ID, []core.MetricPoint{{Step: 1, Name: "r", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	end(t, s, ts[0].ID, core.StatusSucceeded, 1)
	if v := version("a member running"); v != "" {
		t.Fatalf("version %q with a member queued, want none", v)
	}
	end(t, s, ts[1].ID, core.StatusFailed, 2)
	v1 := version("ended")
	if v1 == "" {
		t.Fatalf("no version of an ended sweep")
	}
	// The first read packs the series, and answers the version it leaves.
	if v2, now := read("the first read"), version("packed"); v2 != now || v2 == v1 || read("a read of the packs") != v2 || version("again") != v2 {
		t.Fatalf("versions %q, then %q as read and %q now: want a new one once packed, then the same", v1, v2, now)
	}
	v2 := version("packed")
	seen := map[string]bool{v1: true, v2: true}
	next := func(what string) {
		t.Helper()
		v := version(what)
		if seen[v] {
			t.Fatalf("%s: version %q seen before", what, v)
		}
		seen[v] = true
		read(what)
		seen[version(what+", read")] = true
	}
	if err := s.AppendMetrics(ctx, ts[0].ID, []core.MetricPoint{{Step: 2, Name: "r", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	next("a late point")
	if err := s.SetFinalReward(ctx, ts[1].ID, 3); err != nil {
		t.Fatal(err)
	}
	next("a final reward")
	if got, err := s.RetrySweep(ctx, "s1", rerunOf); err != nil || len(got) != 1 {
		t.Fatalf("RetrySweep: %v %v", got, err)
	}
	if v := version("retried"); v != "" {
		t.Fatalf("version %q with a retried member queued", v)
	}
	if v, err := s.SweepSeriesVersion(ctx, "s-missing", "r"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("version of an unknown sweep: %q %v", v, err)
	}
}

// seriesVersion is sweep s1's version of its members' series "r".
func seriesVersion(t *testing.T, s store.Store, what string) string {
	t.Helper()
	v, err := s.SweepSeriesVersion(t.Context(), "s1", "r")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}
