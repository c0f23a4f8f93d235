package core

import (
	"slices"
	"testing"
)

func TestSweepRetried(t *testing.T) {
	all := []Status{StatusQueued, StatusDispatched, StatusRunning, StatusSucceeded,
		StatusFailed, StatusCancelled, StatusTimeout, StatusLost}
	want := map[Status]bool{StatusFailed: true, StatusCancelled: true, StatusTimeout: true}
	for _, s := range all {
		if got := slices.Contains(SweepRetried(), s); got != want[s] {
			t.Errorf("SweepRetried has %s: %v, want %v", s, got, want[s])
		}
	}
	if len(SweepRetried()) != len(want) {
		t.Errorf("SweepRetried = %v, want only %v", SweepRetried(), want)
	}
}
