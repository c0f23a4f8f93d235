package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
)

// fakeStore records the batches it is handed; a row whose task id is
// "fenced" fails. Commits block on gate when set.
type fakeStore struct {
	store.Store
	mu      sync.Mutex
	batches []int
	gate    chan struct{}
	entered chan struct{}
}

func (f *fakeStore) UpdateTasks(ctx context.Context, us []store.Update) []error {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(us))
	f.mu.Unlock()
	errs := make([]error, len(us))
	for i, u := range us {
		if u.Task.ID == "fenced" {
			errs[i] = core.ErrFenced
		} else {
			u.Task.Worker = "written"
		}
	}
	return errs
}

func (f *fakeStore) CreateTasks(ctx context.Context, ts []*core.Task) []error {
	errs := make([]error, len(ts))
	for i, t := range ts {
		if t.ID == "dup" {
			errs[i] = core.ErrConflict
		}
	}
	return errs
}

func TestBatcherCoalesces(t *testing.T) {
	f := &fakeStore{gate: make(chan struct{}), entered: make(chan struct{}, 100)}
	b := store.NewBatcher(f, 10)
	// The first call commits alone and holds the commit open; 25 more
	// arrive meanwhile and must go in batches of at most 10.
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := core.Task{ID: "first"}
		if err := b.UpdateTask(t.Context(), &tk, store.Expect{}); err != nil || tk.Worker != "written" {
			t.Errorf("first: %v %q", err, tk.Worker)
		}
	})
	<-f.entered
	errs := make([]error, 25)
	for i := range 25 {
		wg.Go(func() {
			id := "ok"
			if i%5 == 0 {
				id = "fenced"
			}
			tk := core.Task{ID: id}
			errs[i] = b.UpdateTask(t.Context(), &tk, store.Expect{})
			if errs[i] == nil && tk.Worker != "written" {
				t.Errorf("row %d not written back", i)
			}
		})
	}
	// Let the callers queue up (at most 5 s), then release the commits.
	testutil.Poll(5*time.Second, time.Millisecond, func() bool { return b.PendingUpdates() >= 25 })
	close(f.gate)
	wg.Wait()
	for i, err := range errs {
		if want := i%5 == 0; want != errors.Is(err, core.ErrFenced) || !want && err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.batches) != 4 || f.batches[0] != 1 || f.batches[1] != 10 || f.batches[2] != 10 || f.batches[3] != 5 {
		t.Fatalf("batches %v, want [1 10 10 5]", f.batches)
	}
}

func TestBatcherAbandonedCallIsNotWritten(t *testing.T) {
	f := &fakeStore{gate: make(chan struct{}), entered: make(chan struct{}, 100)}
	b := store.NewBatcher(f, 10)
	done := make(chan error)
	go func() {
		tk := core.Task{ID: "first"}
		done <- b.UpdateTask(t.Context(), &tk, store.Expect{})
	}()
	<-f.entered
	ctx, cancel := context.WithCancel(t.Context())
	abandoned := core.Task{ID: "late"}
	go func() { done <- b.UpdateTask(ctx, &abandoned, store.Expect{}) }()
	testutil.WaitFor(t, 10*time.Second, "the abandoned call queued", func() bool { return b.PendingUpdates() >= 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v", err)
	}
	close(f.gate)
	if err := <-done; err != nil {
		t.Fatalf("first: %v", err)
	}
	// The abandoned row never reached the store.
	tk := core.Task{ID: "after"}
	if err := b.UpdateTask(t.Context(), &tk, store.Expect{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if abandoned.Worker != "" || len(f.batches) != 2 {
		t.Fatalf("abandoned row written (%q) or batches %v, want [1 1]", abandoned.Worker, f.batches)
	}
}

func TestBatcherCreate(t *testing.T) {
	b := store.NewBatcher(&fakeStore{}, 0)
	if err := b.CreateTask(t.Context(), &core.Task{ID: "dup"}); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("dup: %v", err)
	}
	if err := b.CreateTask(t.Context(), &core.Task{ID: "x"}); err != nil {
		t.Fatalf("x: %v", err)
	}
}

// mixedStore is a fakeStore that is also a store.TaskWriter; it records
// each WriteTasks call as "creates+updates".
type mixedStore struct {
	fakeStore
	writes []string
}

func (m *mixedStore) WriteTasks(ctx context.Context, cs []*core.Task, us []store.Update) ([]error, []error) {
	if m.entered != nil {
		m.entered <- struct{}{}
	}
	if m.gate != nil {
		<-m.gate
	}
	m.mu.Lock()
	m.writes = append(m.writes, fmt.Sprintf("%d+%d", len(cs), len(us)))
	m.mu.Unlock()
	f := fakeStore{}
	return f.CreateTasks(ctx, cs), f.UpdateTasks(ctx, us)
}

func TestBatcherMixesCreatesAndUpdates(t *testing.T) {
	m := &mixedStore{fakeStore: fakeStore{gate: make(chan struct{}), entered: make(chan struct{}, 100)}}
	b := store.NewBatcher(m, 10)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.CreateTask(t.Context(), &core.Task{ID: "first"}); err != nil {
			t.Errorf("first: %v", err)
		}
	})
	<-m.entered
	for i := range 3 {
		wg.Go(func() {
			id := "c"
			if i == 0 {
				id = "dup"
			}
			if err := b.CreateTask(t.Context(), &core.Task{ID: id}); (id == "dup") != errors.Is(err, core.ErrConflict) {
				t.Errorf("create %s: %v", id, err)
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			tk := core.Task{ID: "u"}
			if err := b.UpdateTask(t.Context(), &tk, store.Expect{}); err != nil || tk.Worker != "written" {
				t.Errorf("update: %v %q", err, tk.Worker)
			}
		})
	}
	// The two waits below share one budget of 5 s.
	deadline := time.Now().Add(5 * time.Second)
	testutil.Poll(time.Until(deadline), time.Millisecond, func() bool { return b.PendingUpdates() >= 3+4 })
	// A batch larger than the bound, queued after them, still commits as
	// one, alone.
	big := make([]store.Update, 12)
	for i := range big {
		id := "big"
		if i == 3 {
			id = "fenced"
		}
		big[i] = store.Update{Task: &core.Task{ID: id}}
	}
	wg.Go(func() {
		errs := b.UpdateTasks(t.Context(), big)
		for i, err := range errs {
			if (i == 3) != errors.Is(err, core.ErrFenced) || i != 3 && err != nil {
				t.Errorf("big row %d: %v", i, err)
			}
		}
	})
	testutil.Poll(time.Until(deadline), time.Millisecond, func() bool { return b.PendingUpdates() >= 3+4+12 })
	close(m.gate)
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	got := strings.Join(m.writes, " ")
	if got != "1+0 3+4 0+12" {
		t.Fatalf("writes %q, want 1+0 3+4 0+12", got)
	}
}

// laneStore blocks the commits of updates that do not leave QUEUED until
// released, and lets the others through.
type laneStore struct {
	store.Store
	entered, release chan struct{}
}

func (l *laneStore) UpdateTasks(ctx context.Context, us []store.Update) []error {
	if us[0].Expect.Status != core.StatusQueued {
		l.entered <- struct{}{}
		<-l.release
	}
	return make([]error, len(us))
}

// TestBatcherDispatchLane: on a store with many connections, a dispatch
// (updates from QUEUED) commits while a batch of other updates is still
// committing, instead of waiting for it.
func TestBatcherDispatchLane(t *testing.T) {
	l := &laneStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	b := store.NewBatcher(l, 0)
	report := make(chan error, 1)
	go func() {
		report <- b.UpdateTask(t.Context(), &core.Task{ID: "r1"}, store.Expect{Fence: 1, Status: core.StatusRunning})
	}()
	<-l.entered // the report's batch is committing, and holds its lane
	done := make(chan []error, 1)
	go func() {
		done <- b.UpdateTasks(t.Context(), []store.Update{{Task: &core.Task{ID: "q1"}, Expect: store.Expect{Status: core.StatusQueued}},
			{Task: &core.Task{ID: "q2"}, Expect: store.Expect{Status: core.StatusQueued}}})
	}()
	select {
	case errs := <-done:
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("dispatch: %v", errs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatch waited for the report's commit")
	}
	close(l.release)
	if err := <-report; err != nil {
		t.Fatal(err)
	}
}
