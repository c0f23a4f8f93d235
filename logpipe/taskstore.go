package logpipe

import (
	"context"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

// taskStoreStripes serialise the writes of one run with its publication, so
// a run's events go out in the order its writes committed.
const taskStoreStripes = 64

// rereadTimeout bounds the read-back of a run after a write, also when the
// writer's context ended right after the write.
const rereadTimeout = 5 * time.Second

// TaskStore wraps st so that every run it creates or changes (CreateTask(s),
// UpdateTask(s), SetFinalReward) is published to sink as the store now has it,
// read back after the write. Writes that fail publish nothing, and a failed
// read-back only loses the event, never the write. Everything else passes
// through. Safe for concurrent use, as st is.
func TaskStore(st store.Store, sink EventSink) store.Store {
	return &taskStore{Store: st, sink: sink}
}

type taskStore struct {
	store.Store
	sink    EventSink
	stripes [taskStoreStripes]sync.Mutex
}

func (ts *taskStore) stripe(id string) *sync.Mutex {
	return &ts.stripes[ts.stripeIndex(id)]
}

func (ts *taskStore) stripeIndex(id string) uint32 {
	x := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		x ^= uint32(id[i])
		x *= 16777619
	}
	return x % taskStoreStripes
}

func (ts *taskStore) CreateTask(ctx context.Context, t *core.Task) error {
	if t.ID == "" {
		// The store assigns nothing else an id could depend on; serialise
		// after the write, when the id is known.
		if err := ts.Store.CreateTask(ctx, t); err != nil {
			return err
		}
		mu := ts.stripe(t.ID)
		mu.Lock()
		defer mu.Unlock()
		ts.publish(ctx, t.ID)
		return nil
	}
	mu := ts.stripe(t.ID)
	mu.Lock()
	defer mu.Unlock()
	if err := ts.Store.CreateTask(ctx, t); err != nil {
		return err
	}
	ts.publish(ctx, t.ID)
	return nil
}

func (ts *taskStore) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	mu := ts.stripe(t.ID)
	mu.Lock()
	defer mu.Unlock()
	if err := ts.Store.UpdateTask(ctx, t, exp); err != nil {
		return err
	}
	ts.publish(ctx, t.ID)
	return nil
}

// CreateTasks creates ts in one batch of the wrapped store and publishes
// each run created.
func (ts *taskStore) CreateTasks(ctx context.Context, tasks []*core.Task) []error {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		if t.ID == "" {
			t.ID = core.NewTaskID() // as the store would: the stripe needs it now
		}
		ids[i] = t.ID
	}
	defer ts.lockStripes(ids)()
	errs := ts.Store.CreateTasks(ctx, tasks)
	for i, err := range errs {
		if err == nil {
			ts.publish(ctx, ids[i])
		}
	}
	return errs
}

// UpdateTasks applies us in one batch of the wrapped store and publishes
// each run changed (once per row that succeeded, in row order).
func (ts *taskStore) UpdateTasks(ctx context.Context, us []store.Update) []error {
	ids := make([]string, len(us))
	for i, u := range us {
		ids[i] = u.Task.ID
	}
	defer ts.lockStripes(ids)()
	errs := ts.Store.UpdateTasks(ctx, us)
	for i, err := range errs {
		if err == nil {
			ts.publish(ctx, ids[i])
		}
	}
	return errs
}

// lockStripes locks the stripes of ids, each once and in index order (so
// two batches cannot deadlock), and returns the unlock.
func (ts *taskStore) lockStripes(ids []string) func() {
	var want [taskStoreStripes]bool
	for _, id := range ids {
		want[ts.stripeIndex(id)] = true
	}
	for i := range want {
		if want[i] {
			ts.stripes[i].Lock()
		}
	}
	return func() {
		for i := range want {
			if want[i] {
				ts.stripes[i].Unlock()
			}
		}
	}
}

func (ts *taskStore) SetFinalReward(ctx context.Context, id string, v float64) error {
	mu := ts.stripe(id)
	mu.Lock()
	defer mu.Unlock()
	if err := ts.Store.SetFinalReward(ctx, id, v); err != nil {
		return err
	}
	ts.publish(ctx, id)
	return nil
}

func (ts *taskStore) publish(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rereadTimeout)
	defer cancel()
	t, err := ts.Store.Task(rctx, id)
	if err != nil {
		return
	}
	ts.sink.TaskChanged(t)
}
