package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// gatedWaiter is a MetricsWaiter whose WaitMetrics tells in which run it
// waits for, then waits for release (closed: it returns at once).
type gatedWaiter struct {
	in      chan string
	release chan struct{}
}

func newGatedWaiter() *gatedWaiter {
	return &gatedWaiter{in: make(chan string, 64), release: make(chan struct{})}
}

func (g *gatedWaiter) WaitMetrics(ctx context.Context, id string) error {
	g.in <- id
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedWaiter) entered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.in:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("WaitMetrics never called")
		return ""
	}
}

// A run's end (UpdateTask and UpdateTasks alike) reaches the store only once
// WaitMetrics returned, so a client that sees it finished sees all its
// metrics; an update that does not end a run does not wait.
func TestMetricsFirst_EndWaitsForMetrics(t *testing.T) {
	f := func(t *testing.T, write func(st store.Store, end *core.Task) error) {
		t.Helper()
		ctx := context.Background()
		raw := openSQLite(t)
		run := aliceRun(t, raw, core.Task{Command: []string{"true"}})
		g := newGatedWaiter()
		st := store.MetricsFirst(raw, g)

		d := run
		if err := d.Dispatch("w1", nil, 1); err != nil {
			t.Fatal(err)
		}
		if err := st.UpdateTask(ctx, &d, store.Expect{Fence: 0, Status: core.StatusQueued}); err != nil {
			t.Fatal(err) // a waiting WaitMetrics would hold it until the test times out
		}
		if len(g.in) != 0 {
			t.Fatal("an update that does not end the run waited for its metrics")
		}

		done := make(chan error, 1)
		go func() {
			end := d
			if err := end.Cancel("cancelled", time.Now()); err != nil {
				done <- err
				return
			}
			done <- write(st, &end)
		}()
		if id := g.entered(t); id != run.ID {
			t.Fatalf("WaitMetrics(%q), want the run %q", id, run.ID)
		}
		if got, err := raw.Task(ctx, run.ID); err != nil || got.Status != core.StatusDispatched {
			t.Fatalf("while its metrics wait the run is %v (err %v), want it still DISPATCHED", got.Status, err)
		}
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, err := raw.Task(ctx, run.ID); err != nil || got.Status != core.StatusCancelled {
			t.Fatalf("after its metrics the run is %v (err %v), want CANCELLED", got.Status, err)
		}
	}
	expect := store.Expect{Fence: 1, Status: core.StatusDispatched}
	t.Run("UpdateTask", func(t *testing.T) {
		f(t, func(st store.Store, end *core.Task) error { return st.UpdateTask(context.Background(), end, expect) })
	})
	t.Run("UpdateTasks", func(t *testing.T) {
		f(t, func(st store.Store, end *core.Task) error {
			return st.UpdateTasks(context.Background(), []store.Update{{Task: end, Expect: expect}})[0]
		})
	})
}
