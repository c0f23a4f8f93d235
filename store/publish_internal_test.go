package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestRunLocks: a run's lock holds back only writes of that run, a batch
// locks each run once, and no lock outlives its holders.
func TestRunLocks(t *testing.T) {
	var l runLocks
	unlockA := l.lock("a")
	// Other runs, "a"'s stripe-mates under the old striping included,
	// do not wait for "a".
	l.lockAll([]string{"c", "b", "c"})()
	got := make(chan struct{})
	go func() {
		defer l.lock("a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second holder of run a did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of run a never got the lock")
	}
	testutil.Eventually(t, 5*time.Second, func() (bool, string) {
		l.mu.Lock()
		n := len(l.m)
		l.mu.Unlock()
		return n == 0, fmt.Sprintf("%d locks left after every unlock", n)
	})
}
