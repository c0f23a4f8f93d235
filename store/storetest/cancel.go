package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func testCancelRequests(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	mustMove(t, s, "r1", core.StatusRunning, 4)
	got, err := s.CancelRequested(t.Context(), []string{"r1", "r2", "nope"})
	if err != nil || len(got) != 0 {
		t.Fatalf("CancelRequested before any request: %v, %v", got, err)
	}
	for range 2 { // a second request is not an error
		if err := s.RequestCancel(t.Context(), "r1"); err != nil {
			t.Fatalf("RequestCancel(r1): %v", err)
		}
	}
	if err := s.RequestCancel(t.Context(), "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("RequestCancel of an unknown run: %v, want ErrNotFound", err)
	}
	got, err = s.CancelRequested(t.Context(), []string{"r1", "r2", "nope"})
	if err != nil || !reflect.DeepEqual(got, map[string]bool{"r1": true}) {
		t.Fatalf("CancelRequested: %v, %v; want r1 only", got, err)
	}
	// The request is not a state change: the run's row is untouched.
	if tk := mustGet(t, s, "r1"); tk.Status != core.StatusRunning || tk.Fence != 4 {
		t.Fatalf("run after RequestCancel: %s/%d", tk.Status, tk.Fence)
	}
	// Many ids at once (more than one chunk of an IN list).
	many := make([]string, 1200)
	for i := range many {
		many[i] = "x"
	}
	many[1100] = "r1"
	if got, err = s.CancelRequested(t.Context(), many); err != nil || !got["r1"] || len(got) != 1 {
		t.Fatalf("CancelRequested of 1200 ids: %v, %v", got, err)
	}
	if got, err = s.CancelRequested(t.Context(), nil); err != nil || len(got) != 0 {
		t.Fatalf("CancelRequested(nil): %v, %v", got, err)
	}
}
