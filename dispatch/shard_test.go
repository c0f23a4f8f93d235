package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func runShard(t *testing.T, s *shard) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// Async work runs beside the shard; ordered work waits until every earlier
// async function returned.
func TestShardAsyncOrdering(t *testing.T) {
	s := newShard(100, 4)
	runShard(t, s)
	release := make(chan struct{})
	asyncDone := make(chan struct{})
	s.tryPush(func() { <-release; close(asyncDone) }, true)
	second := make(chan struct{})
	s.tryPush(func() { close(second) }, true) // does not wait for the first
	waitClosed(t, second, "a second async function waited for the first")
	ordered := make(chan bool, 1)
	s.push(func() {
		select {
		case <-asyncDone:
			ordered <- true
		default:
			ordered <- false
		}
	})
	select {
	case <-ordered:
		t.Fatal("ordered work ran before earlier async work returned")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case ok := <-ordered:
		if !ok {
			t.Fatal("ordered work ran before earlier async work returned")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ordered work never ran")
	}
}

// At most maxAsync async functions run at once; the others start as they
// return.
func TestShardAsyncIsBounded(t *testing.T) {
	const limit, n = 3, 20
	s := newShard(100, limit)
	runShard(t, s)
	var running, peak atomic.Int32
	var mu sync.Mutex
	var order []int
	release := make(chan struct{})
	all := make(chan struct{})
	var left atomic.Int32
	left.Store(n)
	for i := range n {
		s.tryPush(func() {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			r := running.Add(1)
			for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
			}
			<-release
			running.Add(-1)
			if left.Add(-1) == 0 {
				close(all)
			}
		}, true)
	}
	testutil.WaitFor(t, 10*time.Second, "the first async functions to start", func() bool { return running.Load() == limit })
	close(release)
	waitClosed(t, all, "async work never finished")
	if p := peak.Load(); p != limit {
		t.Fatalf("%d async functions ran at once, want at most %d", p, limit)
	}
	if len(order) != n {
		t.Fatalf("%d of %d async functions ran", len(order), n)
	}
}

// A full shard refuses a worker's report; the master's own work is queued.
func TestShardBacklogIsBounded(t *testing.T) {
	s := newShard(3, 1) // not running: nothing drains it
	for i := range 3 {
		if !s.tryPush(func() {}, i%2 == 0) {
			t.Fatalf("report %d refused below the limit", i)
		}
	}
	if s.tryPush(func() {}, false) || s.tryPush(func() {}, true) {
		t.Fatal("a report queued on a full shard")
	}
	s.push(func() {}) // a session's close, say
	runShard(t, s)
	testutil.WaitFor(t, 10*time.Second, "the shard to drain", func() bool { return s.pending.Load() == 0 })
	if !s.tryPush(func() {}, true) {
		t.Fatal("a report refused after the shard drained")
	}
}
