package sweep

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

var allStatuses = []core.Status{core.StatusQueued, core.StatusDispatched, core.StatusRunning, core.StatusSucceeded,
	core.StatusFailed, core.StatusCancelled, core.StatusTimeout, core.StatusLost}

func TestRetryable(t *testing.T) {
	want := map[core.Status]bool{core.StatusFailed: true, core.StatusCancelled: true, core.StatusTimeout: true}
	for _, s := range allStatuses {
		if Retryable(s) != want[s] {
			t.Errorf("Retryable(%s) = %v, want %v", s, Retryable(s), want[s])
		}
	}
	got := RetryMembers([]core.Status{core.StatusSucceeded, core.StatusFailed, core.StatusRunning, core.StatusTimeout,
		core.StatusLost, core.StatusCancelled, core.StatusQueued})
	if !slices.Equal(got, []int{1, 3, 5}) {
		t.Errorf("RetryMembers = %v, want [1 3 5]", got)
	}
}

// TestRetryProperties: retry picks exactly the members that ended without
// success; once their new runs exist (QUEUED), a second retry picks none,
// and however the new runs end, a later retry picks only those that ended
// without success again. A SUCCEEDED or active member is never rerun.
func TestRetryProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		latest := rapid.SliceOf(rapid.SampledFrom(allStatuses)).Draw(t, "latest")
		for round := range 3 {
			picked := RetryMembers(latest)
			for i, s := range latest {
				if slices.Contains(picked, i) != (s == core.StatusFailed || s == core.StatusCancelled || s == core.StatusTimeout) {
					t.Fatalf("round %d: member %d (%s) picked=%v", round, i, s, slices.Contains(picked, i))
				}
			}
			if !slices.IsSorted(picked) {
				t.Fatalf("picked %v not in member order", picked)
			}
			for _, i := range picked {
				latest[i] = core.StatusQueued // the new run
			}
			if again := RetryMembers(latest); len(again) != 0 {
				t.Fatalf("round %d: a second retry right after picks %v", round, again)
			}
			for _, i := range picked { // the new runs end somehow
				latest[i] = rapid.SampledFrom(allStatuses).Draw(t, "outcome")
			}
		}
	})
}
