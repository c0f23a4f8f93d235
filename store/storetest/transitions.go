package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testTransitions walks every edge of the task state machine
// (core.Transitions) with its transition functions, storing each move
// with a fenced update from the state before it. The backend must store
// every move as made, and after it refuse each (fence, status) the run
// held before: the table never lets a fence's status repeat, so a writer
// that lost the race can never overwrite a later state.
func testTransitions(t *testing.T, s store.Store) {
	u := mustUser(t, s, "alice")
	now := at(time.Hour)
	code := 0
	n := 0
	for from, tos := range core.Transitions() {
		for _, to := range tos {
			n++
			tk := mustTask(t, s, u, fmt.Sprintf("r%d", n), 0, at(time.Duration(n)))
			tk.Attempt = 1 // of MaxRetries + 1 = 2
			var held []store.Expect
			step := func(name string, move func(*core.Task) error) {
				t.Helper()
				exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
				if err := move(&tk); err != nil {
					t.Fatalf("%s → %s, %s from %s: %v", from, to, name, exp.Status, err)
				}
				if err := s.UpdateTask(t.Context(), &tk, exp); err != nil {
					t.Fatalf("%s → %s: storing %s (%s → %s): %v", from, to, name, exp.Status, tk.Status, err)
				}
				checkTask(t, fmt.Sprintf("%s → %s after %s", from, to, name), mustGet(t, s, tk.ID), tk)
				held = append(held, exp)
				for _, old := range held {
					stale := tk
					stale.Error = "a stale writer"
					if err := s.UpdateTask(t.Context(), &stale, old); !errors.Is(err, core.ErrFenced) {
						t.Fatalf("%s → %s: after %s, a write expecting %s/%d got %v, want ErrFenced", from, to, name, old.Status, old.Fence, err)
					}
				}
			}
			moves := map[core.Status]func(*core.Task) error{
				core.StatusDispatched: func(tk *core.Task) error { return tk.Dispatch("w1", []int{0}, tk.Fence+1) },
				core.StatusRunning:    func(tk *core.Task) error { return tk.Start(now) },
				core.StatusSucceeded:  func(tk *core.Task) error { return tk.Finish(core.StatusSucceeded, &code, "", now) },
				core.StatusTimeout:    func(tk *core.Task) error { return tk.Finish(core.StatusTimeout, nil, "timed out", now) },
				core.StatusCancelled:  func(tk *core.Task) error { return tk.Cancel("cancelled", now) },
				core.StatusLost:       func(tk *core.Task) error { return tk.Lose("lease expired") },
				core.StatusQueued:     func(tk *core.Task) error { _, err := tk.Requeue("lease expired", now); return err },
				core.StatusFailed: func(tk *core.Task) error {
					if tk.Status == core.StatusLost { // its last attempt
						_, err := tk.Requeue("lease expired", now)
						return err
					}
					return tk.Finish(core.StatusFailed, &code, "exit code 1", now)
				},
			}
			path := map[core.Status][]core.Status{
				core.StatusQueued:     nil,
				core.StatusDispatched: {core.StatusDispatched},
				core.StatusRunning:    {core.StatusDispatched, core.StatusRunning},
				core.StatusLost:       {core.StatusDispatched, core.StatusLost},
			}[from]
			if from == core.StatusLost && to == core.StatusFailed {
				// Attempt 2 of 2: requeued once, under a new fence, and lost again.
				path = append(path, core.StatusQueued, core.StatusDispatched, core.StatusLost)
			}
			for _, st := range append(path, to) {
				step("the move to "+string(st), moves[st])
			}
			if tk.Status != to {
				t.Fatalf("%s → %s ended %s", from, to, tk.Status)
			}
		}
	}
}
