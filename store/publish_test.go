package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
	"github.com/rlsched/rlsched/store/storetest"
)

type recordSink struct {
	mu    sync.Mutex
	tasks []core.Task
}

func (r *recordSink) TaskChanged(t core.Task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, t)
}

func (r *recordSink) WorkerChanged(core.WorkerInfo) {}

func (r *recordSink) take() []core.Task {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.tasks
	r.tasks = nil
	return out
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "rlsched.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// The decorator is a store like any other.
func TestPublishing_Conformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return store.Publishing(openSQLite(t), &recordSink{})
	})
}

// publishedRun is a publishing store over a fresh SQLite file, its sink,
// and one run of alice's created in it.
func publishedRun(t *testing.T) (store.Store, *recordSink, core.Task) {
	t.Helper()
	sink := &recordSink{}
	st := store.Publishing(openSQLite(t), sink)
	return st, sink, aliceRun(t, st, core.Task{Name: "run", Command: []string{"true"}})
}

// aliceRun creates the user alice in st and run as hers, and returns the
// run as created.
func aliceRun(t *testing.T, st store.Store, run core.Task) core.Task {
	t.Helper()
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	run.UserID = u.ID
	if err := st.CreateTask(t.Context(), &run); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestPublishing_PublishesWrites(t *testing.T) {
	ctx := context.Background()
	st, sink, task := publishedRun(t)
	ev := sink.take()
	if len(ev) != 1 || ev[0].ID != task.ID || ev[0].Status != core.StatusQueued || ev[0].User != "alice" {
		t.Fatalf("after create: %+v", ev)
	}

	cur := ev[0]
	next := cur
	next.Status, next.Fence, next.Worker = core.StatusDispatched, 7, "w1"
	if err := st.UpdateTask(ctx, &next, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	ev = sink.take()
	if len(ev) != 1 || ev[0].Status != core.StatusDispatched || ev[0].Worker != "w1" || ev[0].Fence != 7 {
		t.Fatalf("after update: %+v", ev)
	}
	// A fenced-off write publishes nothing.
	stale := cur
	stale.Status = core.StatusFailed
	if err := st.UpdateTask(ctx, &stale, store.Expect{Fence: 0, Status: core.StatusQueued}); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale update: %v", err)
	}
	if err := st.SetFinalReward(ctx, task.ID, 187.5); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFinalReward(ctx, "r-unknown", 1); err == nil {
		t.Fatal("final reward of an unknown run")
	}
	ev = sink.take()
	if len(ev) != 1 || ev[0].FinalReward == nil || *ev[0].FinalReward != 187.5 || ev[0].Status != core.StatusDispatched {
		t.Fatalf("after final reward: %+v", ev)
	}
}

// Concurrent writers of one run: its events come out in commit order, the
// last one being the run as stored.
func TestPublishing_EventsInCommitOrder(t *testing.T) {
	ctx := context.Background()
	sink := &recordSink{}
	st := store.Publishing(openSQLite(t), sink)
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	task := core.Task{UserID: u.ID, Command: []string{"true"}}
	if err := st.CreateTask(ctx, &task); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				cur, err := st.Task(ctx, task.ID)
				if err != nil {
					t.Error(err)
					return
				}
				n := cur
				n.Fence++
				_ = st.UpdateTask(ctx, &n, store.Expect{Fence: cur.Fence, Status: cur.Status}) // losers are fenced off
			}
		}()
	}
	wg.Wait()
	ev := sink.take()
	final, err := st.Task(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) < 2 || ev[len(ev)-1].Fence != final.Fence {
		t.Fatalf("%d events, last fence %d, stored %d", len(ev), ev[len(ev)-1].Fence, final.Fence)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].Fence <= ev[i-1].Fence {
			t.Fatalf("event %d has fence %d after %d", i, ev[i].Fence, ev[i-1].Fence)
		}
	}
}

// The batch methods publish each row that succeeded, and only those.
func TestPublishing_PublishesBatches(t *testing.T) {
	ctx := context.Background()
	sink := &recordSink{}
	st := store.Publishing(store.NewBatcher(openSQLite(t), 0), sink)
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	ts := []*core.Task{{ID: "a", UserID: u.ID}, {ID: "a", UserID: u.ID}, {UserID: u.ID}, {ID: "b", UserID: u.ID + 99}}
	errs := st.CreateTasks(ctx, ts)
	if errs[0] != nil || !errors.Is(errs[1], core.ErrConflict) || errs[2] != nil || !errors.Is(errs[3], core.ErrNotFound) {
		t.Fatalf("CreateTasks: %v", errs)
	}
	ev := sink.take()
	if len(ev) != 2 || ev[0].ID != "a" || ev[1].ID != ts[2].ID || ev[1].ID == "" {
		t.Fatalf("after CreateTasks: %+v", ev)
	}
	a, c := ev[0], ev[1]
	a.Status, a.Fence = core.StatusDispatched, 3
	c.Status, c.Fence = core.StatusDispatched, 4
	errs = st.UpdateTasks(ctx, []store.Update{
		{Task: &a, Expect: store.Expect{Fence: 0, Status: core.StatusQueued}},
		{Task: &c, Expect: store.Expect{Fence: 1, Status: core.StatusQueued}}, // fenced
	})
	if errs[0] != nil || !errors.Is(errs[1], core.ErrFenced) {
		t.Fatalf("UpdateTasks: %v", errs)
	}
	ev = sink.take()
	if len(ev) != 1 || ev[0].ID != "a" || ev[0].Status != core.StatusDispatched || ev[0].Fence != 3 {
		t.Fatalf("after UpdateTasks: %+v", ev)
	}
	// Single-row calls go through the Batcher underneath and still publish.
	a.Status = core.StatusRunning
	if err := st.UpdateTask(ctx, &a, store.Expect{Fence: 3, Status: core.StatusDispatched}); err != nil {
		t.Fatal(err)
	}
	if ev = sink.take(); len(ev) != 1 || ev[0].Status != core.StatusRunning {
		t.Fatalf("after UpdateTask: %+v", ev)
	}
}

// An update's event is built from the written fields and the run's fixed
// ones, without reading the run back: it must be exactly the run as a read
// gives it, for a remembered run and for one the decorator never saw.
func TestPublishing_EventIsTheStoredRun(t *testing.T) {
	ctx := context.Background()
	raw := openSQLite(t)
	sink := &recordSink{}
	st := store.Publishing(store.NewBatcher(raw, 0), sink)
	u := core.User{Username: "carol", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	seen := core.Task{UserID: u.ID, Name: "n", Project: "p", Command: []string{"python", "x.py"},
		Params: json.RawMessage(`{ "lr": 0.1 }`), GPUs: 2, Priority: 3, Env: map[string]string{"A": "1"},
		Tags: []string{"t"}, Workdir: "/w", TraceID: "tr", TimeoutSeconds: 60, MaxRetries: 1,
		Code: core.CodeInfo{GitCommit: "abc", GitDirty: true}}
	unseen := seen
	unseen.ID = "r-unseen"
	if err := st.CreateTask(ctx, &seen); err != nil {
		t.Fatal(err)
	}
	if err := raw.CreateTask(ctx, &unseen); err != nil { // not through the decorator
		t.Fatal(err)
	}
	check := func(what string, id string) {
		t.Helper()
		ev := sink.take()
		want, err := raw.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev) != 1 {
			t.Fatalf("%s: %d events", what, len(ev))
		}
		got, _ := json.Marshal(ev[0])
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) || ev[0].Fence != want.Fence { // the fence is not in the JSON
			t.Fatalf("%s: event\n%s\nstored\n%s", what, got, exp)
		}
	}
	check("create", seen.ID)
	for _, id := range []string{seen.ID, unseen.ID} {
		cur, err := raw.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		steps := []func(*core.Task){
			func(t *core.Task) {
				t.Status, t.Fence, t.Worker, t.GPUIndices = core.StatusDispatched, 9, "w1", []int{0, 1}
			},
			func(t *core.Task) { now := time.Now(); t.Status, t.StartedAt = core.StatusRunning, &now },
			func(t *core.Task) {
				now, code, r := time.Now(), 0, 2.5
				t.Status, t.FinishedAt, t.ExitCode, t.FinalReward = core.StatusSucceeded, &now, &code, &r
			},
		}
		for i, step := range steps {
			next := cur
			step(&next)
			if err := st.UpdateTask(ctx, &next, store.Expect{Fence: cur.Fence, Status: cur.Status}); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("%s step %d", id, i), id)
			cur = next
		}
		if err := st.SetFinalReward(ctx, id, 4); err != nil {
			t.Fatal(err)
		}
		check(id+" final reward", id)
	}
}

// A write from DISPATCHED straight to an end with a start (a TaskFinished
// that superseded its TaskStarted) publishes the RUNNING it passed over,
// then the end.
func TestPublishing_StartPassedOver(t *testing.T) {
	ctx := context.Background()
	st, sink, task := publishedRun(t)
	d := sink.take()[0]
	if err := d.Dispatch("w1", nil, 3); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateTask(ctx, &d, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	sink.take()
	started := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	end := d
	if err := end.Start(started); err != nil {
		t.Fatal(err)
	}
	code := 0
	if err := end.Finish(core.StatusSucceeded, &code, "", started.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateTasks(ctx, []store.Update{{Task: &end, Expect: store.Expect{Fence: 3, Status: core.StatusDispatched}}})[0]; err != nil {
		t.Fatal(err)
	}
	ev := sink.take()
	if len(ev) != 2 || ev[0].Status != core.StatusRunning || ev[0].FinishedAt != nil || ev[0].ExitCode != nil ||
		ev[0].StartedAt == nil || !ev[0].StartedAt.Equal(started) || ev[1].Status != core.StatusSucceeded {
		t.Fatalf("events: %+v", ev)
	}
	got, err := st.Task(ctx, task.ID)
	if err != nil || got.StartedAt == nil || !got.StartedAt.Equal(started) {
		t.Fatalf("stored start %v (%v), want %v", got.StartedAt, err, started)
	}
}
