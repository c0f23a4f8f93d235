package store

import (
	"testing"
	"time"
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		n := len(l.m)
		l.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d locks left after every unlock", n)
		}
		time.Sleep(time.Millisecond)
	}
}
