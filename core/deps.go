package core

import (
	"fmt"
	"strings"
	"time"
)

// A run's dependencies (issue 29, API.md "Dependencies"): it waits, QUEUED,
// until each of its parents has ended as its condition says, and ends
// CANCELLED (Reason ReasonDependency) once one can no longer hold.

// The conditions a parent's end is tested with.
const (
	WhenSucceeded = "succeeded" // the parent ended SUCCEEDED (the default)
	WhenEnded     = "ended"     // the parent ended, in any final status
	WhenFailed    = "failed"    // the parent ended in a final status other than SUCCEEDED
)

// ReasonDependency is the Reason of a run cancelled because a parent's
// condition can no longer hold (its Error names the parent), and the
// pendingCode of a run that still waits for one.
const ReasonDependency = "dependency"

// MaxParents bounds a run's parents (a sweep counts each of its members).
const MaxParents = 1000

// Dep is one parent of a run: the run it waits for and the condition.
// Sweep names the sweep whose member Run is when the submission named the
// sweep (`{"sweep": id}` expands to every member's latest run at
// submission); it says where the edge came from, nothing more.
type Dep struct {
	Run   string `json:"run"`
	Sweep string `json:"sweep,omitempty"`
	When  string `json:"when"`
}

// ValidWhen reports whether w is a condition ("" is not: callers default it).
func ValidWhen(w string) bool {
	return w == WhenSucceeded || w == WhenEnded || w == WhenFailed
}

// DepOutcome is what a parent in status s means for a condition: holds
// (true, true), can no longer hold (true, false), or not decided yet
// (false, _) while the parent has not ended. A parent that does not exist
// (status "") can never satisfy anything.
func DepOutcome(when string, s Status) (decided, holds bool) {
	if s == "" {
		return true, false
	}
	if !s.Terminal() {
		return false, false
	}
	switch when {
	case WhenEnded:
		return true, true
	case WhenFailed:
		return true, s != StatusSucceeded
	default:
		return true, s == StatusSucceeded
	}
}

// ParentState is one parent of a waiting run as the store has it now:
// the condition and the parent's status ("" for a parent not found).
type ParentState struct {
	Parent string
	When   string
	Status Status
}

// DepVerdict decides a waiting run from its parents' states: ready when
// every condition holds; failed, with the first parent whose condition can
// no longer hold, when one cannot; else it waits, on the parents listed
// in waitingOn (their ids, in order).
func DepVerdict(ps []ParentState) (ready bool, failed *ParentState, waitingOn []string) {
	for i := range ps {
		decided, holds := DepOutcome(ps[i].When, ps[i].Status)
		if decided && !holds {
			return false, &ps[i], nil
		}
		if !decided {
			waitingOn = append(waitingOn, ps[i].Parent)
		}
	}
	return len(waitingOn) == 0, nil, waitingOn
}

// DepFailure is the Error of a run cancelled for its parent p.
func DepFailure(p ParentState) string {
	if p.Status == "" {
		return fmt.Sprintf("dependency: parent run %s does not exist", p.Parent)
	}
	return fmt.Sprintf("dependency: parent run %s ended %s, and this run waited for it to have %s", p.Parent, p.Status, p.When)
}

// CancelForDependency ends a waiting run whose parent p failed its
// condition, at at.
func (t *Task) CancelForDependency(p ParentState, at time.Time) error {
	if err := t.Cancel(DepFailure(p), at); err != nil {
		return err
	}
	t.Reason = ReasonDependency
	return nil
}

// DepPending is the pending sentence of a run that waits on parents
// (their ids, the conditions taken from after).
func DepPending(after []Dep, waitingOn []string) string {
	if len(waitingOn) == 0 {
		waitingOn = make([]string, 0, len(after))
		for _, d := range after {
			waitingOn = append(waitingOn, d.Run)
		}
	}
	when := map[string]string{}
	for _, d := range after {
		when[d.Run] = d.When
	}
	const show = 3
	parts := make([]string, 0, show)
	for i, id := range waitingOn {
		if i == show {
			break
		}
		parts = append(parts, fmt.Sprintf("%s to have %s", id, when[id]))
	}
	s := "waits for run " + strings.Join(parts, ", ")
	if len(waitingOn) > 1 {
		s = "waits for runs " + strings.Join(parts, ", ")
	}
	if n := len(waitingOn) - show; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

// ParentEnv is the environment naming a run's parents: RLSCHED_PARENT_1..n,
// each parent's id in the order of after.
func ParentEnv(after []Dep) map[string]string {
	if len(after) == 0 {
		return nil
	}
	env := make(map[string]string, len(after))
	for i, d := range after {
		env[fmt.Sprintf("RLSCHED_PARENT_%d", i+1)] = d.Run
	}
	return env
}
