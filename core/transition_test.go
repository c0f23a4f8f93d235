package core

import (
	"errors"
	"testing"
	"time"
)

func TestTransitionTableShape(t *testing.T) {
	table := Transitions()
	for _, s := range Statuses() {
		if _, ok := table[s]; ok == s.Terminal() {
			t.Errorf("%s: in the table %v, terminal %v", s, ok, s.Terminal())
		}
		for _, to := range table[s] {
			if !to.Valid() || to == s {
				t.Errorf("%s → %s", s, to)
			}
		}
	}
	// Along the edges that keep the fence (all but QUEUED → DISPATCHED) no
	// status comes back: a fenced write's expected state is never one the
	// run has left.
	var visit func(s Status, seen map[Status]bool)
	visit = func(s Status, seen map[Status]bool) {
		if seen[s] {
			t.Fatalf("a cycle through %s keeps the fence", s)
		}
		seen[s] = true
		for _, to := range table[s] {
			if s != StatusQueued || to != StatusDispatched {
				visit(to, seen)
			}
		}
		delete(seen, s)
	}
	for _, s := range Statuses() {
		visit(s, map[Status]bool{})
	}
}

// Every function moves only along the table, and every edge of the table
// is some function's move.
func TestTransitionFunctionsFollowTheTable(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	code := 3
	funcs := map[string]func(*Task) error{
		"Dispatch":        func(tk *Task) error { return tk.Dispatch("w", []int{1}, 9) },
		"Start":           func(tk *Task) error { return tk.Start(now) },
		"Finish":          func(tk *Task) error { return tk.Finish(StatusSucceeded, &code, "", now) },
		"FinishFailed":    func(tk *Task) error { return tk.Finish(StatusFailed, &code, "exit 3", now) },
		"FinishCancelled": func(tk *Task) error { return tk.Finish(StatusCancelled, nil, "cancelled", now) },
		"FinishTimeout":   func(tk *Task) error { return tk.Finish(StatusTimeout, nil, "timed out", now) },
		"FinishQueued":    func(tk *Task) error { return tk.Finish(StatusQueued, nil, "", now) },
		"Lose":            func(tk *Task) error { return tk.Lose("gone") },
		"Requeue":         func(tk *Task) error { _, err := tk.Requeue("gone", now); return err },
		"RequeueLast":     func(tk *Task) error { tk.MaxRetries = 0; _, err := tk.Requeue("gone", now); return err },
		"Cancel":          func(tk *Task) error { return tk.Cancel("cancelled", now) },
	}
	made := map[[2]Status]bool{}
	for _, from := range Statuses() {
		for name, f := range funcs {
			tk := Task{ID: "r", Status: from, Attempt: 1, MaxRetries: 1, Fence: 4}
			before := tk
			err := f(&tk)
			if err != nil {
				if !errors.Is(err, ErrTransition) {
					t.Errorf("%s from %s: %v, want ErrTransition", name, from, err)
				}
				if tk.Status != before.Status || tk.Fence != before.Fence || tk.FinishedAt != nil || tk.StartedAt != nil {
					t.Errorf("%s from %s failed and changed the run: %+v", name, from, tk)
				}
				continue
			}
			if !CanMove(from, tk.Status) {
				t.Errorf("%s moved %s → %s, which the table forbids", name, from, tk.Status)
			}
			made[[2]Status{from, tk.Status}] = true
		}
	}
	for from, tos := range Transitions() {
		for _, to := range tos {
			if !made[[2]Status{from, to}] {
				t.Errorf("no function moves %s → %s", from, to)
			}
		}
	}
}

func TestTransitionFields(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	tk := Task{ID: "r", Status: StatusQueued, Attempt: 1, MaxRetries: 1, Error: "old"}
	if err := tk.Dispatch("w1", []int{0, 1}, 7); err != nil || tk.Worker != "w1" || tk.Fence != 7 || tk.Error != "" || len(tk.GPUIndices) != 2 {
		t.Fatalf("Dispatch: %v %+v", err, tk)
	}
	if err := tk.Lose("lease expired"); err != nil || tk.Status != StatusLost || tk.Error != "lease expired" {
		t.Fatalf("Lose: %v %+v", err, tk)
	}
	if ok, err := tk.Requeue("lease expired", now); !ok || err != nil || tk.Status != StatusQueued || tk.Attempt != 2 || tk.Worker != "" || tk.GPUIndices != nil || tk.Fence != 7 {
		t.Fatalf("Requeue: %v %v %+v", ok, err, tk)
	}
	_ = tk.Dispatch("w2", nil, 8)
	if err := tk.Start(now); err != nil || tk.StartedAt == nil || tk.StartedAt.Location() != time.UTC {
		t.Fatalf("Start: %v %+v", err, tk)
	}
	_ = tk.Lose("gone")
	if ok, err := tk.Requeue("gone", now); ok || err != nil || tk.Status != StatusFailed || tk.Error != "lost after 2 attempt(s): gone" || tk.FinishedAt == nil {
		t.Fatalf("last Requeue: %v %v %+v", ok, err, tk)
	}
	d := Task{ID: "d", Status: StatusDispatched}
	if err := d.Finish(StatusFailed, nil, "could not start", now); err != nil || d.StartedAt == nil || !d.StartedAt.Equal(now) || d.ExitCode != nil {
		t.Fatalf("Finish without a start: %v %+v", err, d)
	}
}

// A preemption requeues an active run with attempt + 1 that does not
// count against maxRetries: a run with one retry, preempted twice, is
// still requeued once when LOST, and fails the next time.
func TestPreemptNotARetry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tk := Task{ID: "r", Status: StatusRunning, Attempt: 1, MaxRetries: 1}
	for i := range 2 {
		if err := tk.Preempt("preempted", now); err != nil {
			t.Fatal(err)
		}
		if tk.Status != StatusQueued || tk.Attempt != i+2 || tk.Preemptions != i+1 || tk.PreemptedAt == nil || tk.Worker != "" {
			t.Fatalf("after preemption %d: %+v", i+1, tk)
		}
		tk.Status = StatusRunning
	}
	// One retry left: attempt 3 = 1 + 2 preemptions.
	if err := tk.Lose("gone"); err != nil {
		t.Fatal(err)
	}
	if ok, err := tk.Requeue("gone", now); err != nil || !ok {
		t.Fatalf("requeue with a retry left: %v %v", ok, err)
	}
	tk.Status = StatusRunning
	_ = tk.Lose("gone")
	if ok, _ := tk.Requeue("gone", now); ok {
		t.Fatal("requeued past maxRetries")
	}
	q := Task{ID: "q", Status: StatusQueued}
	if err := q.Preempt("x", now); err == nil {
		t.Fatal("a QUEUED run preempted")
	}
}
