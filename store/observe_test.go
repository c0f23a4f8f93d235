package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

type recordObserver struct {
	mu      sync.Mutex
	commits []int // rows of each
	created int
	moves   []string
	queued  []time.Duration
}

func (o *recordObserver) StoreCommit(d time.Duration, rows int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commits = append(o.commits, rows)
}

func (o *recordObserver) RunsCreated(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.created += n
}

func (o *recordObserver) RunMoved(from, to core.Status, queued time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.moves = append(o.moves, fmt.Sprintf("%s>%s", from, to))
	if to == core.StatusDispatched {
		o.queued = append(o.queued, queued)
	}
}

// TestObserved: every committed write is reported once, through the
// Batcher too (WriteTasks), with the runs created and each status change;
// a refused write changes nothing but the commit count; the wait of a
// dispatched run is from its last write.
func TestObserved(t *testing.T) {
	ctx := context.Background()
	o := &recordObserver{}
	raw := openSQLite(t)
	st := store.NewBatcher(store.Observed(raw, o), 0)
	if _, ok := store.Observed(raw, o).(store.TaskWriter); !ok {
		t.Fatal("Observed hides the backend's WriteTasks from the Batcher")
	}
	u := core.User{Username: "alice", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	queuedAt := time.Now().Add(-time.Minute)
	tk := core.Task{ID: "r1", UserID: u.ID, Command: []string{"x"}, CreatedAt: queuedAt, UpdatedAt: queuedAt}
	if err := st.CreateTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	errs := st.CreateTasks(ctx, []*core.Task{{ID: "r2", UserID: u.ID}, {ID: "r3", UserID: u.ID + 100}})
	if errs[0] != nil || !errors.Is(errs[1], core.ErrNotFound) {
		t.Fatalf("CreateTasks: %v", errs)
	}
	read, err := st.Task(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	move := func(to core.Status, fence uint64) error {
		exp := store.Expect{Fence: read.Fence, Status: read.Status}
		next := read
		next.Status, next.Fence = to, fence
		err := st.UpdateTask(ctx, &next, exp)
		if err == nil {
			read = next
		}
		return err
	}
	if err := move(core.StatusDispatched, 1); err != nil {
		t.Fatal(err)
	}
	stale := read
	if err := move(core.StatusRunning, 1); err != nil {
		t.Fatal(err)
	}
	read = stale // a writer that lost the race
	if err := move(core.StatusFailed, 1); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("a stale update: %v", err)
	}
	read, _ = st.Task(ctx, "r1")
	if err := move(core.StatusSucceeded, 1); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.created != 2 {
		t.Errorf("runs created: %d, want 2", o.created)
	}
	if want := []string{"QUEUED>DISPATCHED", "DISPATCHED>RUNNING", "RUNNING>SUCCEEDED"}; !slices.Equal(o.moves, want) {
		t.Errorf("moves %v, want %v", o.moves, want)
	}
	if len(o.queued) != 1 || o.queued[0] < time.Minute || o.queued[0] > time.Hour {
		t.Errorf("queued for %v, want about a minute", o.queued)
	}
	if len(o.commits) < 6 || slices.Contains(o.commits, 0) {
		t.Errorf("commits %v: want one a batch of the Batcher, each with its rows", o.commits)
	}
}
