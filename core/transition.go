package core

import (
	"fmt"
	"slices"
	"time"
)

// transitions is the task state machine: from each status, the statuses a
// run may move to. Terminal statuses have none. Only Dispatch changes a
// run's fence (the claim of a new lease), and along the edges that keep
// it the statuses never repeat (QUEUED → DISPATCHED is the only way back
// into an active status), so a fenced write that expects (fence, status)
// can never match a state the run already left: the store's
// compare-and-swap on (fence, status) is safe against ABA.
var transitions = map[Status][]Status{
	StatusQueued:     {StatusDispatched, StatusCancelled},
	StatusDispatched: {StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled, StatusTimeout, StatusLost},
	StatusRunning:    {StatusSucceeded, StatusFailed, StatusCancelled, StatusTimeout, StatusLost},
	StatusLost:       {StatusQueued, StatusFailed, StatusCancelled},
}

// Transitions returns the state machine's table: from each non-terminal
// status, the statuses a run may move to.
func Transitions() map[Status][]Status {
	out := make(map[Status][]Status, len(transitions))
	for from, to := range transitions {
		out[from] = slices.Clone(to)
	}
	return out
}

// CanMove reports whether a run may move from one status to another.
func CanMove(from, to Status) bool { return slices.Contains(transitions[from], to) }

// ErrTransition is wrapped by the transition functions when the run is in a
// status the transition cannot leave.
var ErrTransition = fmt.Errorf("%w: not allowed from the run's status", ErrConflict)

// move sets t's status to to, or fails when the table forbids it.
func (t *Task) move(to Status) error {
	if !CanMove(t.Status, to) {
		return fmt.Errorf("cannot move run %s from %s to %s: %w", t.ID, t.Status, to, ErrTransition)
	}
	t.Status = to
	return nil
}

// The transitions, as functions over a Task. Each changes t only when the
// table allows the move from t's status, and otherwise returns an error
// wrapping ErrTransition. Times are the caller's (a master's clock), stored
// in UTC.

// Dispatch places a QUEUED run on worker, on gpus (none: a CPU slot), under
// the fence of its new lease: QUEUED → DISPATCHED.
func (t *Task) Dispatch(worker string, gpus []int, fence uint64) error {
	if err := t.move(StatusDispatched); err != nil {
		return err
	}
	t.Fence, t.Worker, t.GPUIndices, t.Error = fence, worker, gpus, ""
	t.record(string(StatusDispatched), "", time.Time{})
	return nil
}

// Start records that the worker started the run at at: DISPATCHED →
// RUNNING.
func (t *Task) Start(at time.Time) error {
	if err := t.move(StatusRunning); err != nil {
		return err
	}
	at = at.UTC()
	t.StartedAt = &at
	t.record(string(StatusRunning), "", at)
	return nil
}

// Finish ends an active run at at with a terminal status (SUCCEEDED,
// FAILED, CANCELLED or TIMEOUT), its exit code (nil: none, the process did
// not start or exit) and an error message. A run that ends without a
// recorded start (its TaskStarted was lost) gets at as its start too.
func (t *Task) Finish(status Status, exitCode *int, errMsg string, at time.Time) error {
	if !status.Terminal() || !t.Status.Active() {
		return fmt.Errorf("cannot finish run %s (%s) as %s: %w", t.ID, t.Status, status, ErrTransition)
	}
	if err := t.move(status); err != nil {
		return err
	}
	at = at.UTC()
	t.FinishedAt, t.ExitCode, t.Error = &at, exitCode, errMsg
	if t.StartedAt == nil {
		t.StartedAt = &at
	}
	t.record(string(status), errMsg, at)
	return nil
}

// Lose marks an active run whose worker no longer runs it (its lease
// expired, its worker came back without it): DISPATCHED | RUNNING → LOST.
func (t *Task) Lose(reason string) error {
	if err := t.move(StatusLost); err != nil {
		return err
	}
	t.Error = reason
	t.record(string(StatusLost), reason, time.Time{})
	return nil
}

// Requeue gives a LOST run its next attempt while attempt ≤ maxRetries
// (LOST → QUEUED, attempt + 1, off its worker), else fails it at at with
// reason (LOST → FAILED). It reports whether the run was requeued.
func (t *Task) Requeue(reason string, at time.Time) (bool, error) {
	if t.Status != StatusLost {
		return false, fmt.Errorf("cannot requeue run %s (%s): %w", t.ID, t.Status, ErrTransition)
	}
	// Attempts that ended in a preemption are not retries.
	if t.Attempt-t.Preemptions <= t.MaxRetries {
		if err := t.move(StatusQueued); err != nil {
			return false, err
		}
		t.Attempt++
		t.Worker, t.GPUIndices, t.StartedAt, t.ExitCode = "", nil, nil, nil
		t.record(string(StatusQueued), reason, at.UTC())
		return true, nil
	}
	if err := t.move(StatusFailed); err != nil {
		return false, err
	}
	at = at.UTC()
	t.FinishedAt = &at
	t.Error = fmt.Sprintf("lost after %d attempt(s): %s", t.Attempt, reason)
	t.record(string(StatusFailed), t.Error, at)
	return false, nil
}

// Cancel ends a run that a user cancelled, at at, with errMsg: from QUEUED
// or LOST at once, from DISPATCHED or RUNNING once its worker stopped it or
// was lost.
func (t *Task) Cancel(errMsg string, at time.Time) error {
	if err := t.move(StatusCancelled); err != nil {
		return err
	}
	at = at.UTC()
	t.FinishedAt, t.Error = &at, errMsg
	t.record(string(StatusCancelled), errMsg, at)
	return nil
}

// Preempt requeues an active run stopped for a run of higher priority, as
// at at: DISPATCHED | RUNNING → QUEUED by way of LOST (one write: the
// store sees RUNNING → QUEUED), attempt + 1 without counting against
// MaxRetries, off its worker, with why in its error.
func (t *Task) Preempt(why string, at time.Time) error {
	if !t.Status.Active() {
		return fmt.Errorf("cannot preempt run %s (%s): %w", t.ID, t.Status, ErrTransition)
	}
	if err := t.move(StatusLost); err != nil {
		return err
	}
	if err := t.move(StatusQueued); err != nil {
		return err
	}
	at = at.UTC()
	t.record(HistoryPreempted, why, at) // of the attempt it stopped
	t.Attempt++
	t.Preemptions++
	t.PreemptedAt = &at
	t.Worker, t.GPUIndices, t.StartedAt, t.ExitCode, t.FinishedAt = "", nil, nil, nil, nil
	t.Error = why
	return nil
}
