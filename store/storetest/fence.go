package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func testFencedUpdate(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustMove(t, s, "r1", core.StatusDispatched, 5)

	// f tries to fail run id under exp; on an error it checks nothing changed.
	f := func(id string, exp store.Expect, want error) {
		t.Helper()
		before, _ := s.Task(t.Context(), id)
		tk := before
		tk.ID, tk.Status, tk.Fence, tk.Error, tk.ExitCode = id, core.StatusFailed, exp.Fence+1, "boom", ptr(2)
		err := s.UpdateTask(t.Context(), &tk, exp)
		if !errors.Is(err, want) {
			t.Fatalf("UpdateTask(%s, %+v): got %v, want %v", id, exp, err, want)
		}
		if err != nil {
			if after, _ := s.Task(t.Context(), id); !equalTask(after, before) {
				t.Fatalf("a failed UpdateTask wrote: before %+v, after %+v", before, after)
			}
		}
	}
	f("r1", store.Expect{Fence: 4, Status: core.StatusDispatched}, core.ErrFenced) // stale fence
	f("r1", store.Expect{Fence: 6, Status: core.StatusDispatched}, core.ErrFenced) // future fence
	f("r1", store.Expect{Fence: 5, Status: core.StatusRunning}, core.ErrFenced)    // wrong status
	f("r1", store.Expect{Fence: 0, Status: core.StatusQueued}, core.ErrFenced)     // the old state
	f("r-missing", store.Expect{Fence: 5, Status: core.StatusDispatched}, core.ErrNotFound)
	f("r1", store.Expect{Fence: 5, Status: core.StatusDispatched}, nil)
	got := mustGet(t, s, "r1")
	if got.Status != core.StatusFailed || got.Fence != 6 || got.Error != "boom" {
		t.Fatalf("after the winning update: got %s/%d %q, want FAILED/6 \"boom\"", got.Status, got.Fence, got.Error)
	}
	// The winner's own state is now the only accepted one.
	f("r1", store.Expect{Fence: 5, Status: core.StatusDispatched}, core.ErrFenced)
}

// testConcurrentFencedUpdate: 20 writers race for one run from the same
// expected state; exactly one wins and its write is the one stored.
func testConcurrentFencedUpdate(t *testing.T, s store.Store) {
	const writers = 20
	u := mustUser(t, s, "alice")
	for round := range 3 {
		id := fmt.Sprintf("r%d", round)
		base := mustTask(t, s, u, id, 0, at(0))
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() {
				tk := base
				tk.Status, tk.Fence = core.StatusDispatched, uint64(i+1)
				tk.Worker, tk.GPUIndices = fmt.Sprintf("w%d", i), []int{i}
				errs[i] = s.UpdateTask(t.Context(), &tk, store.Expect{Fence: 0, Status: core.StatusQueued})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, core.ErrFenced):
				t.Fatalf("round %d: writer %d: got %v, want nil or ErrFenced", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		got := mustGet(t, s, id)
		if got.Fence != uint64(winner+1) || got.Worker != fmt.Sprintf("w%d", winner) ||
			len(got.GPUIndices) != 1 || got.GPUIndices[0] != winner {
			t.Fatalf("round %d: stored %d/%s/%v, want the winner %d's write", round, got.Fence, got.Worker,
				got.GPUIndices, winner)
		}
	}
}

func equalTask(a, b core.Task) bool {
	return reflect.DeepEqual(canon(a), canon(b))
}
