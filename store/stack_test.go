package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// A run's end through the stack waits for its metric points, which the
// points store takes to the backend; once written it is counted at the
// backend, charged to its owner and published.
func TestStack_ARunsEnd(t *testing.T) {
	ctx := context.Background()
	raw := openSQLite(t)
	o, sink, g := &recordObserver{}, &recordSink{}, newGatedWaiter()
	var points store.Store
	st, err := store.Stack(raw, store.StackOptions{Observer: o, HalfLife: time.Hour, Sink: sink,
		Points: func(s store.Store) (store.MetricsWaiter, error) {
			points = s
			return g, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	run := aliceRun(t, st, core.Task{Command: []string{"true"}, GPUs: 1})
	d := run
	if err := d.Dispatch("w1", []int{0}, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateTask(ctx, &d, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	r := d
	started := time.Now().Add(-time.Minute)
	if err := r.Start(started); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateTask(ctx, &r, store.Expect{Fence: 1, Status: core.StatusDispatched}); err != nil {
		t.Fatal(err)
	}
	if err := points.AppendMetrics(ctx, run.ID, []core.MetricPoint{{Step: 1, Name: "reward", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if ms, err := raw.Metrics(ctx, run.ID, nil); err != nil || len(ms["reward"]) != 1 {
		t.Fatalf("the points store's points in the backend: %v (err %v)", ms, err)
	}

	done := make(chan error, 1)
	go func() {
		end := r
		code := 0
		if err := end.Finish(core.StatusSucceeded, &code, "", started.Add(30*time.Second)); err != nil {
			done <- err
			return
		}
		done <- st.UpdateTask(ctx, &end, store.Expect{Fence: 1, Status: core.StatusRunning})
	}()
	if id := g.entered(t); id != run.ID {
		t.Fatalf("WaitMetrics(%q), want the run %q", id, run.ID)
	}
	ended := func(ts []core.Task) bool {
		return slices.ContainsFunc(ts, func(t core.Task) bool { return t.Status == core.StatusSucceeded })
	}
	if ended(sink.take()) {
		t.Fatal("the run's end was published while its metrics were awaited")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ended(sink.take()) {
		t.Fatal("the run's end was not published")
	}
	o.mu.Lock()
	moves := slices.Clone(o.moves)
	o.mu.Unlock()
	if want := []string{"QUEUED>DISPATCHED", "DISPATCHED>RUNNING", "RUNNING>SUCCEEDED"}; !slices.Equal(moves, want) {
		t.Fatalf("the backend saw %v, want %v", moves, want)
	}
	us, err := raw.Usage(ctx, started.Add(30*time.Second), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(us, func(x store.UserUsage) bool { return x.UserID == run.UserID })
	if i < 0 || us[i].Usage < 29 || us[i].Usage > 31 {
		t.Fatalf("alice's usage %+v, want the run's 30 GPU-seconds", us)
	}
}

// Stack fails with the error of building the points' writer.
func TestStack_PointsError(t *testing.T) {
	bad := errors.New("no log dir")
	_, err := store.Stack(openSQLite(t), store.StackOptions{Observer: &recordObserver{}, HalfLife: time.Hour, Sink: &recordSink{},
		Points: func(store.Store) (store.MetricsWaiter, error) { return nil, bad }})
	if !errors.Is(err, bad) {
		t.Fatalf("Stack: %v, want %v", err, bad)
	}
}
