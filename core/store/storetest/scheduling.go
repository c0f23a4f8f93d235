package storetest

import (
	"errors"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

// SetPriority changes a QUEUED run's priority, and with it its place in
// QueuedTasks; a run that left the queue is core.ErrConflict, an unknown
// one core.ErrNotFound.
func testSetPriority(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	got, err := s.SetPriority(t.Context(), "r2", 7)
	if err != nil || got.ID != "r2" || got.Priority != 7 {
		t.Fatalf("SetPriority(r2, 7): %+v, %v", got, err)
	}
	q, err := s.QueuedTasks(t.Context(), 10)
	if err != nil || len(q) != 2 || q[0].ID != "r2" || q[0].Priority != 7 {
		t.Fatalf("queue after raising r2: %v, %v", ids(q), err)
	}
	if _, err := s.SetPriority(t.Context(), "nope", 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetPriority of an unknown run: %v, want ErrNotFound", err)
	}
	mustMove(t, s, "r1", core.StatusRunning, 3)
	if _, err := s.SetPriority(t.Context(), "r1", 1); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("SetPriority of a RUNNING run: %v, want ErrConflict", err)
	}
	if tk := mustGet(t, s, "r1"); tk.Priority != 0 || tk.Status != core.StatusRunning {
		t.Fatalf("refused SetPriority changed the run: %+v", tk)
	}
}
