package dispatch

import (
	"context"
	"testing"
	"time"
)

// Async work runs beside the shard; free work does not wait for it;
// ordered work waits until every earlier async function returned.
func TestShardAsyncOrdering(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := newShard()
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	release := make(chan struct{})
	asyncDone := make(chan struct{})
	s.pushAsync(func() { <-release; close(asyncDone) })
	s.pushAsync(func() {}) // a second async one does not wait for the first
	free := make(chan struct{})
	s.pushFree(func() { close(free) })
	select {
	case <-free:
	case <-time.After(5 * time.Second):
		t.Fatal("free work waited for async work")
	}
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
	case <-time.After(5 * time.Second):
		t.Fatal("ordered work never ran")
	}
}
